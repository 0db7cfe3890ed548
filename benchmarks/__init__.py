"""The torch.distributed benchmark harness (measurement suites land here; see the harness issue)."""
