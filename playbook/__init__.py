"""The playbook UI: pages that build themselves inside the current gr.Blocks, and plot builders."""
