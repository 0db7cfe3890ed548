"""The one exception the calculators raise for bad input.

Every message names the broken rule with the numbers involved and says what to change, so a
widget can show it inline and the estimate CLI can put it on the scenario's line.
"""


class ConfigError(ValueError):
    """Invalid model, hardware or layout. `problems` holds one message per broken rule."""

    def __init__(self, problems):
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def require(problems: list, ok: bool, message: str) -> None:
    """Append `message` to `problems` when `ok` is false (collect every problem, then raise)."""
    if not ok:
        problems.append(message)
