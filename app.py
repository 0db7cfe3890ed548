"""The LLM training playbook app: composes the book and launches. Nothing else."""
import os

# Gradio rebuilds a pandas summary of up to 10,000 past events after every event (for its "Runs"
# footer): at steady load that was half the server's time. Refresh it every 500 events instead.
os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", "500")
os.environ.setdefault("GRADIO_ANALYTICS_MAX_EVENTS", "2000")

from playbook import book  # noqa: E402

if __name__ == "__main__":
    book.render_ahead()                           # on a second core while Gradio loads: 2 to 4 s less to start

import gradio as gr  # noqa: E402  (reads the settings above)

from starlette.middleware import Middleware  # noqa: E402

from playbook import narrow, serve, ui  # noqa: E402
from playbook.url import HEAD  # noqa: E402

CSS = (".gradio-container {max-width: 1280px !important; width: 100%; margin: auto}"
       # the chapters' navigation bar on one line at 1280 px, from the left, as a table of contents
       " nav.fillable {justify-content: flex-start !important; flex-wrap: wrap; gap: 0 !important;"
       " padding: 0 16px !important}"
       " nav.fillable a {padding-left: 5px !important; padding-right: 5px !important; font-size: 0.9em}"
       # the config.json upload drawn as a button (the theme's secondary one is white on the white panel)
       " button.pb-upload {border: 1px solid var(--color-accent) !important; background: var(--color-accent-soft)"
       " !important; width: auto !important; align-self: flex-start; margin: 4px 12px 8px !important}"
       # the open chapter's link marked plainly, not only by a white pill on a near-white bar
       " nav.fillable a.active {font-weight: 600; box-shadow: inset 0 -2px 0 var(--color-accent)}"
       # a widget's shorter column of controls is filled with the panel's colour, not a grey band
       " .gr-group .row.unequal-height {align-items: stretch}"
       " .gr-group .row.unequal-height > .column {background: var(--block-background-fill)}"
       # on a phone a wide formula, table or command scrolls in its own box, not the whole page sideways
       " .prose {min-width: 0; max-width: 100%}"
       " .prose table, .prose pre, .prose .katex-display {display: block; max-width: 100%; overflow-x: auto}"
       # a table's frame as wide as the table (not the page's width around a narrower one), and its
       # cells broken between words only: a narrow screen scrolls the table rather than splitting
       # "ZeRO-1" or "1,024" into a letter per line
       " .prose table {width: fit-content}"
       " .prose th, .prose td {overflow-wrap: normal; word-break: normal}"
       # a widget's message inset from the panel's edge, as its controls are
       " .gr-group [id$='-note'] {padding: 0 12px}")


def build_app() -> gr.Blocks:
    demo = gr.Blocks(title="LLM training playbook", delete_cache=serve.DELETE_CACHE)
    demo.playbook_widgets = ui.build(demo)            # kept for the tests: each widget's controls and outputs
    # Gradio queues every event; each widget sets its own concurrency (widgets.CONCURRENCY), so no
    # demo.queue(...) call: it would build Gradio's web app once more (half a second of the start).
    # The queue Blocks made gets its bound here instead (serve.QUEUE_MAX).
    demo._queue.max_size = serve.QUEUE_MAX
    serve.explain_file_inputs(demo)
    return demo


def launch_options() -> dict:
    """What `python app.py` passes to launch() beyond the address (playbook/serve.py's bounds)."""
    return dict(theme=gr.themes.Soft(), head=HEAD + narrow.HEAD, css=CSS, max_file_size=serve.MAX_UPLOAD_BYTES,
                app_kwargs={"middleware": [Middleware(serve.BodyLimit)]},
                # the app keeps no per-visitor state; Gradio's default keeps 10,000 sessions'
                # copies of the page's config (about 0.6 MB each, measured): 6 GB on a public Space
                state_session_capacity=100)


if __name__ == "__main__":
    build_app().launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                       server_port=int(os.environ.get("GRADIO_SERVER_PORT", 7860)), **launch_options())
