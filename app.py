"""The LLM training playbook app: composes the pages and launches. Nothing else."""
import gradio as gr

from playbook.memory_page import build_memory_page


def build_app() -> gr.Blocks:
    with gr.Blocks(title="LLM training playbook") as demo:
        gr.Markdown("# LLM training playbook\nMemory, compute and communication of training large "
                    "language models on GPU clusters, computed live.")
        build_memory_page()
    return demo


if __name__ == "__main__":
    build_app().launch(server_name="127.0.0.1", server_port=7860, theme=gr.themes.Soft())
