"""Run a script of the old tree (argv[1]: its root) with the old tree's moe_select, not the installed (editable) one."""
import runpy
import sys

root = sys.argv[1]
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()
                    and "editable" not in getattr(f, "__name__", "").lower()]
sys.path_hooks[:] = [h for h in sys.path_hooks if "editable" not in getattr(h, "__module__", "").lower()]
sys.path.insert(0, root)
for m in [m for m in sys.modules if m == "moe_select" or m.startswith("moe_select.")]:
    del sys.modules[m]
script = sys.argv[2]
sys.argv = sys.argv[2:]
sys.path.insert(0, str(__import__("pathlib").Path(script).parent))
runpy.run_path(script, run_name="__main__")
