"""The position explorer: a Gradio app (app.py) over what views.py computes."""
