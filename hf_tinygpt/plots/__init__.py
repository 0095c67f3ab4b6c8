"""Pictures of position schemes (the [plots] extra)."""
