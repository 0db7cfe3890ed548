"""The LLM training playbook app: composes the book and launches. Nothing else."""
import os

import gradio as gr

from playbook import ui
from playbook.url import HEAD

CSS = ".gradio-container {max-width: 1280px !important; margin: auto}"


def build_app() -> gr.Blocks:
    with gr.Blocks(title="LLM training playbook") as demo:
        gr.Markdown("# LLM training playbook\nMemory, compute and communication of training large language models "
                    "on GPU clusters, computed live by one set of calculators. Every setting is in the URL: "
                    "copy it to share what you see.")
        ui.build()
    demo.queue(default_concurrency_limit=4)
    return demo


if __name__ == "__main__":
    build_app().launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"), server_port=7860, theme=gr.themes.Soft(), head=HEAD, css=CSS)
