"""calculators/ is layered: each sub-package imports only those below it, so a reader can take
the model in one layer at a time (README, Layout)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "calculators"
LAYERS = ("specs", "pipeline", "memory", "time", "planning")
TOP = ("scenario", "__main__")          # the contract's entry points, above every layer
# the budget's and the Chinchilla sizer's requests are read with the contract's own parsers
UPWARD = {("planning", "scenario")}


def _imports(path: Path, package: str) -> set[str]:
    """The calculators sub-packages or top modules a file imports, relative or absolute."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                parts = [package] if package else (node.module or "").split(".")[:1]
            elif node.level == 2:
                parts = (node.module or "").split(".")[:1]
            elif (node.module or "").startswith("calculators."):
                parts = node.module.split(".")[1:2]
            else:
                continue
            out.update(p for p in parts if p)
    return out


def test_every_module_sits_in_a_layer():
    loose = sorted(p.stem for p in ROOT.glob("*.py") if p.stem not in TOP + ("__init__",))
    assert not loose, f"modules outside the layers: {loose}"
    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(LAYERS)


def test_layers_import_only_downward():
    wrong = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).glob("*.py")):
            for target in _imports(path, layer):
                rank = LAYERS.index(target) if target in LAYERS else len(LAYERS)
                if rank > LAYERS.index(layer) and (layer, target) not in UPWARD:
                    wrong.append(f"{layer}/{path.name} imports {target}")
    assert not wrong, wrong


def test_the_check_sees_an_upward_import(tmp_path):
    (tmp_path / "bad.py").write_text("from ..planning.planner import plan\nfrom .models import ModelSpec\n")
    assert _imports(tmp_path / "bad.py", "specs") == {"planning", "specs"}
