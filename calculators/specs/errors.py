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


def require(problems: list, ok: bool, message) -> None:
    """Append `message` to `problems` when `ok` is false (collect every problem, then raise).
    `message` may be a function that builds it: hot paths (the planner builds thousands of
    layouts a second) then format only the messages of rules that are broken."""
    if not ok:
        problems.append(message() if callable(message) else message)
