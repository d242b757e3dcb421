"""Tests that kill the mutants the mutation run (benchmarks/mutation.py, issue 19; mutmut 3.8.1 at bc97a02) left in
moe_select/resolver.py: 14 survivors (fact_file, resolve_layers) and 135 "no tests" mutants of the measured-plan
machine check (machine_here, _machine_differences, _tile_differences, _tile_digest, _fall_back).

Each test names the mutants it kills as mutmut prints them (``resolver.x_function__mutmut_N``). The expectations
are worked out by hand from the inputs: the table tests/fixtures/measurements/cpu_small.json (runners
torch_grouped_mm, torch_native, triton; on the CPU the plan's ranges are torch_grouped_mm up to 64 tokens, then
torch_native, and triton is refused), tile files written here, and the adapter module
tests/fixtures/mutants_resolver/mutants_resolver_tiles.py, whose cores only say which tile file they read. No GPU:
the machine key is this CPU's or a copy of the table's with fields changed.

Equivalent mutants (no input can tell them apart), one line each:

- resolver.x__tile_differences__mutmut_26 (``_load_adapter(module, None, registry)``): ``what`` appears only in the
  texts of the reasons _load_adapter returns, and _tile_differences reads only whether that list is empty.
- resolver.x__tile_differences__mutmut_38 (``make(spec, dev) if (make is not None) or True``): with ``make`` None
  the call raises TypeError, which the ``except Exception`` right around it turns into ``core = None``, as before.
- resolver.x__tile_differences__mutmut_44 (``core = ""`` when the build raises): ``""`` is appended, but
  tile_configs_of_cores reads a core's ``config_source`` through ``getattr(core, "config_source", None)``, and a
  str has none, so it adds no file, exactly as no core does.

_fall_back's ``stacklevel`` (mutants 51, 53, 56 of the run, when it was a fixed 4): 4 attributed the
MeasurementsWarning to resolve's own line, and a fixed 5 to resolve_layers' call of resolve. It is counted now
(resolver._user_stacklevel: the first frame outside the package), which also holds under mutmut, whose trampoline
frames lie inside it: the location tests run in both.

The sampled run on the H200 (benchmarks/results/mutation_sampled_h200_2026-12-02_s9.json: seed 19, 50 of 1600 mutants
at 0c2954f, 6 survivors) is answered by the tests at the end of this file: resolve asking for the machine key of the
device it was given (_prepare_74), the fingerprint reason's exact words (_replan_reasons_83, _89), and
check_environment's catalog source, import-name lookup and prebuilt-package hint (_38, _126, _211). None of the six is
equivalent.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import warnings
from pathlib import Path
from typing import Any

import pytest

import moe_select
import moe_select.resolver as R
from moe_select.catalog import bundled_dirs, default_catalog, load_catalog
from moe_select.environment import Environment
from moe_select.measurements import MachineKey
from moe_select.plans import Plan, Reason
from moe_select.registry import Registry

FIXTURES = Path(__file__).parent / "fixtures"
CPU = FIXTURES / "measurements" / "cpu_small.json"
ADAPTER_DIR = FIXTURES / "mutants_resolver"
ADAPTER = "mutants_resolver_tiles"
SMALL = {"num_experts": 8, "top_k": 2, "hidden_size": 64, "moe_intermediate_size": 32, "activation": "silu",
         "routing": "renormalize"}
DEP = {"arch": "auto", "quant": "bf16", "model": SMALL, "require_adapter": True}
#: Two made-up differences, as _machine_differences writes them.
DIFFS = ["driver (999.1 here, None there)", "torch (9.9.9 here, 2.13.0+cpu there)"]


@pytest.fixture(scope="module")
def measured() -> Plan:
    """The CPU plan from cpu_small.json: runner torch_native, ranges torch_grouped_mm (<= 64) and torch_native, no
    alternatives; the environment made fixed (not detected) so that the rules' choice does not depend on this machine."""
    p = moe_select.plan(DEP, measurements=[CPU])
    assert p.runner == "torch_native" and p.alternatives == [] and p.measurements is not None
    assert [(r.max_tokens, r.runner) for r in p.ranges] == [(64, "torch_grouped_mm"), (None, "torch_native")]
    assert p.measurements.runners() == ["torch_grouped_mm", "torch_native", "triton"]
    return p.model_copy(update={"environment": Environment(detected=False, arch="cpu")})


def with_machine(p: Plan, **changes: Any) -> Plan:
    """``p`` with its table's MachineKey fields ``changes`` (the fingerprint is not checked by these functions)."""
    m = p.measurements
    assert m is not None
    return p.model_copy(update={"measurements": m.model_copy(update={"machine": m.machine.model_copy(update=changes)})})


def digest(*files: Path) -> str:
    """The tile-file digest by its definition (measurements.tile_configs_digest's docstring): sha256 over one
    ``"<name> <sha256 of the bytes>\\n"`` line per file, sorted by name."""
    lines = "".join(f"{f.name} {hashlib.sha256(f.read_bytes()).hexdigest()}\n" for f in sorted(files, key=lambda f: f.name))
    return hashlib.sha256(lines.encode()).hexdigest()


# ----------------------------------------------------------------------------------------------- machine_here
def test_machine_here_is_this_cpu_with_the_tables_packages_and_tiles(measured):
    """Kills resolver.x_machine_here__mutmut_1 (``m = None``), _2 (``assert m is None``), _3 (``packages = None``),
    _4 (``env.package(None)``), _5 (``env.package(name)[2]``: IndexError), _6 (``cuda_graph=None``), _7
    (``packages=None``), _8 (``tile_configs=None``), _10 (``cuda_graph`` left out), _11 (``packages`` left out) and
    _12 (``tile_configs`` left out): the key is this CPU's, with the versions ``env`` has of the table's packages
    (deep_ep not there: None; triton, which the table does not list, not taken), the table's tile digest and the
    plan's cuda_graph."""
    import torch

    try:
        import triton

        triton_v: str | None = str(triton.__version__)
    except ImportError:
        triton_v = None
    p = with_machine(measured, packages={"deep_ep": "1.2.1", "flashinfer-python": "0.6.8"}, tile_configs="ab" * 32)
    p = p.model_copy(update={"cuda_graph": True})
    env = Environment(detected=True, arch="cpu", packages={"flashinfer-python": "0.6.4", "triton": "3.6.0"})
    key = R.machine_here(p, env, device="cpu")
    assert key == MachineKey(gpu="cpu", arch="cpu", driver=None, cuda=getattr(torch.version, "hip", None) or torch.version.cuda,
                             torch=str(torch.__version__), triton=triton_v,
                             packages={"deep_ep": None, "flashinfer-python": "0.6.4"}, moe_select=moe_select.__version__,
                             tile_configs="ab" * 32, cuda_graph=True)


def test_machine_here_hands_the_device_to_this_machine(measured, monkeypatch):
    """Kills resolver.x_machine_here__mutmut_9 (``device=None``) and _13 (``device`` left out), which on a machine
    without a GPU build the same CPU key (the default device is the CPU there): what machine_here asks
    measurements.this_machine for is recorded instead. Also _6, _7, _8, _10, _11, _12 once more."""
    import moe_select.measurements as M

    asked: list[dict[str, Any]] = []

    def this_machine(**kw: Any) -> str:
        asked.append(kw)
        return "key"

    monkeypatch.setattr(M, "this_machine", this_machine)
    p = with_machine(measured, packages={"flashinfer-python": "0.6.8"}, tile_configs="cd" * 32)
    device = object()
    assert R.machine_here(p, Environment(detected=True, packages={"flashinfer-python": "0.6.4"}), device=device) == "key"
    assert asked == [{"cuda_graph": False, "packages": {"flashinfer-python": "0.6.4"}, "tile_configs": "cd" * 32,
                      "device": device}]
    assert asked[0]["device"] is device


# ---------------------------------------------------------------------------------------- _machine_differences
def test_machine_differences_name_each_field_with_both_values(measured):
    """Kills every resolver.x__machine_differences mutant, _1 to _14 (``m = None``, ``assert m is None``, None or
    nothing in place of ``here``, ``f``, ``m.machine``, ``m`` in the getattr calls and the machine_key_mismatch call:
    each raises): the fields in MachineKey's order, here's value first."""
    p = with_machine(measured, gpu="NVIDIA H200", packages={"flashinfer-python": "0.6.8"})
    assert p.measurements is not None
    here = p.measurements.machine.model_copy(update={"gpu": "cpu", "packages": {"flashinfer-python": "0.6.4"}})
    assert R._machine_differences(p, here) == [
        "gpu (cpu here, NVIDIA H200 there)",
        "packages ({'flashinfer-python': '0.6.4'} here, {'flashinfer-python': '0.6.8'} there)"]
    assert R._machine_differences(p, p.measurements.machine) == []


# ------------------------------------------------------------------------------------- _tile_digest, _tile_differences
class _Core:
    """A built core as tile_configs_of_cores sees one: the tile file it read (``config_source`` in ``config_dir``)."""

    def __init__(self, config_source: str, config_dir: Path) -> None:
        self.config_source, self.config_dir = config_source, config_dir


@pytest.fixture
def tiles(tmp_path) -> dict[str, Path]:
    """Four tile files of different content: the one torch_grouped_mm's range core read (``given``), the one a
    torch_grouped_mm core built anew would read (``rebuilt``), torch_native's and triton's."""
    out = {}
    for key, name in (("given", "E8-grouped.json"), ("rebuilt", "E8-grouped-rebuilt.json"),
                      ("torch_native", "E8-native.json"), ("triton", "E8-triton.json")):
        out[key] = tmp_path / name
        out[key].write_text(f'{{"{key}": {{"BLOCK_SIZE_M": 16}}}}\n')
    return out


def test_tile_digest_covers_the_tile_files_the_cores_read(tiles):
    """Kills resolver.x__tile_digest__mutmut_1 (``tile_configs_of_cores(None)``: TypeError): no core, None; a core
    on the default tiles reads no file."""
    assert R._tile_digest([]) is None
    d = tiles["given"].parent
    assert R._tile_digest([_Core("default", d), _Core(tiles["given"].name, d), _Core(tiles["triton"].name, d)]) == \
        digest(tiles["given"], tiles["triton"])


def _catalog(**caps: Any) -> Any:
    """The bundled catalog with only the runners named, each given as ``name=activations`` (the activations its
    adapter implements: its capability's ``adapter.activations``), its module the test adapter; no plugins."""
    base = default_catalog()
    runners = {}
    for name, activations in caps.items():
        cap = base.runners[name]
        assert cap.adapter is not None  # torch_grouped_mm, torch_native and triton state what their adapter implements
        runners[name] = cap.model_copy(update={"module": ADAPTER,
                                               "adapter": cap.adapter.model_copy(update={"activations": activations})})
    return dataclasses.replace(base, runners=runners, plugins={})


def _differences(p: Plan, catalog: Any, tiles: dict[str, Path], table_tiles: str | None) -> list[str]:
    """_tile_differences for ``p`` with the table's tile digest ``table_tiles``: a fresh registry, the dispatch format
    ``standard``, torch_grouped_mm's range core already built (it read ``given``); a core built here reads
    ``spec[runner]`` in ``dev`` (the test adapter)."""
    spec = {"torch_grouped_mm": tiles["rebuilt"].name, "torch_native": tiles["torch_native"].name,
            "triton": tiles["triton"].name}
    dev = tiles["given"].parent
    cores = {"torch_grouped_mm": _Core(tiles["given"].name, dev)}
    return R._tile_differences(with_machine(p, tile_configs=table_tiles), Registry(), catalog, spec, dev, "standard", cores)


def test_tile_differences_build_the_eligible_runners_without_a_core(measured, tiles, monkeypatch):
    """The table timed torch_grouped_mm, torch_native and triton; the plan's eligible runners are torch_grouped_mm
    (its core given) and torch_native (not given: built here through its adapter, reading its tile file); triton is
    refused on the CPU, so it is not built. The digest is over ``given`` and torch_native's file.

    Kills resolver.x__tile_differences__mutmut_1, _2, _3 (``m``/``runners`` None, the assert inverted), _4
    (``eligible = None``), _5, _6 (the given core ignored: torch_grouped_mm rebuilt reads ``rebuilt``), _7 (``or``:
    rebuilt, and triton built), _8 (``core is not None``), _9 (``name not in eligible``: triton built, torch_native
    not), _10, _11 (``cap`` None), _12, _13 (``module`` None), _15 (``adapter(None, ...)``: KeyError), _18, _19
    (an argument left out of catalog.adapter), _21 (``cap is None``), _22 (``or``: the adapter never loaded into the
    fresh registry, so no factory), _23 (``module is None``), _24 (``and _load_adapter(...)``), _25
    (``_load_adapter(None, ...)``), _27 (registry None), _28, _29, _30 (an argument left out of _load_adapter:
    TypeError), _31 to _35 (``make`` None, ``registry.core(None / name, None / one argument)``), _36, _37 (``core``
    None), _39 to _43 (``make(None, dev)``, ``make(spec, None)``, an argument left out, ``make is None``), _45
    (``core is None``), _46 (``append(None)``), _47, _48 (``here`` None, ``_tile_digest(None)``), _49 to _51
    (the comparison forced or inverted)."""
    monkeypatch.syspath_prepend(str(ADAPTER_DIR))
    catalog = _catalog(torch_grouped_mm=["silu"], torch_native=["silu"], triton=["silu"])
    want = digest(tiles["given"], tiles["torch_native"])
    assert _differences(measured, catalog, tiles, want) == []
    assert _differences(measured, catalog, tiles, "0" * 64) == [f"tile_configs ({want} here, {'0' * 64} there)"]
    assert _differences(measured, catalog, tiles, None) == [f"tile_configs ({want} here, None there)"]


def test_tile_differences_skip_a_runner_whose_adapter_does_not_implement_the_layer(measured, tiles, monkeypatch):
    """torch_native's adapter implements gelu only here: Catalog.adapter(name, quant, activation) gives its module
    only when it implements the plan's bf16 and silu (else a plugin's: none), so torch_native is not built and only
    ``given`` is read. Kills resolver.x__tile_differences__mutmut_16 (``adapter(name, None, activation)``) and _17
    and _20 (activation None or left out): with no quant or activation asked for, the module is given and built."""
    monkeypatch.syspath_prepend(str(ADAPTER_DIR))
    catalog = _catalog(torch_grouped_mm=["silu"], torch_native=["gelu"], triton=["silu"])
    want = digest(tiles["given"])
    assert _differences(measured, catalog, tiles, want) == []


def test_tile_differences_skip_a_runner_without_a_capability_file(measured, tiles, monkeypatch):
    """This install has no capability file for torch_native (the catalog lacks it): it is not built, and
    Catalog.adapter, which would raise KeyError for it, is not asked. Kills resolver.x__tile_differences__mutmut_14
    (``... if (cap is not None) or True``) and _21 (``if cap is None``): both call catalog.adapter without a cap."""
    monkeypatch.syspath_prepend(str(ADAPTER_DIR))
    catalog = _catalog(torch_grouped_mm=["silu"], triton=["silu"])
    with pytest.raises(KeyError):
        catalog.adapter("torch_native", "bf16", "silu")
    want = digest(tiles["given"])
    assert _differences(measured, catalog, tiles, want) == []


# ------------------------------------------------------------------------------------------------ _fall_back
def _what(fingerprint: str) -> str:
    return f"the plan's measurements (sha256:{fingerprint}) were taken on another machine: " + "; ".join(DIFFS)


def test_strict_refuses_a_measured_plan_off_its_machine(measured):
    """Kills resolver.x__fall_back__mutmut_1 (``what = None``), _2 (``-``: TypeError), _3 (``fingerprint and ''``:
    empty), _5 (``[:13]``), _6 (``join(None)``), _7 (``"XX; XX"``), _8 to _23 (each field of the refusal: None,
    left out or its text changed); and _4 (``or 'XXXX'``) with a plan that has no fingerprint: ``sha256:`` then
    nothing."""
    fp = measured.measurements_fingerprint
    assert fp is not None and len(fp) == 64
    fix = "measure on this machine (moe-select tune) and plan again; or resolve without strict to fall back to the rules' runner"
    assert R._fall_back(measured, DIFFS, default_catalog(), True) == (None, [Reason(
        code="plan_mismatch", detail=_what(fp[:12]) + "; strict refuses a measured plan off its machine",
        source="plan (measurements.machine)", fix=fix)])
    unmarked = measured.model_copy(update={"measurements_fingerprint": None})
    assert R._fall_back(unmarked, DIFFS, default_catalog(), True)[1][0].detail == \
        "the plan's measurements (sha256:) were taken on another machine: " + "; ".join(DIFFS) + \
        "; strict refuses a measured plan off its machine"


def _rules(tmp_path: Path, body: str) -> Any:
    (tmp_path / "r.yaml").write_text("schema_version: 1\nrules:\n" + body)
    return load_catalog([tmp_path], use_env=False)


def test_fall_back_takes_the_rules_plan_of_the_catalog_given_and_warns(measured, tmp_path):
    """The rules of the catalog given (a site rule that comes before the bundled cpu rule) choose torch_native over the
    plan's own deployment and environment; the plan comes back without its table and ranges, and the warning names
    the differences, the runner and the rule. Kills resolver.x__fall_back__mutmut_24 to _29 (``select`` not called,
    or given None or too few of deployment, environment, catalog), _30 (the catalog left out: the bundled one, whose
    cpu rule would be named), _31 (``report.plan is not None``: refused instead), _50 (``warn(None)``), _52
    (no message), _54 (``MeasurementsWarning(None)``) and _55 (``rule and how``: ``rule`` would be named)."""
    catalog = _rules(tmp_path, "  - id: site-order\n    when: {arch: [cpu]}\n    prefer: [torch_grouped_mm, torch_native]\n")
    with pytest.warns(R.MeasurementsWarning) as rec:
        plan, why = R._fall_back(measured, DIFFS, catalog, False)
    assert why == [] and plan is not None
    assert (plan.runner, plan.chosen_by.how, plan.chosen_by.rule) == ("torch_native", "rule", "site-order")
    assert plan.measurements is None and plan.ranges == [] and plan.deployment == measured.deployment
    assert [str(w.message) for w in rec] == [_what(measured.measurements_fingerprint[:12]) +
                                             ": falling back to the rules' runner torch_native (chosen by site-order)"]


def test_fall_back_warns_at_the_first_frame_outside_the_package(measured, tmp_path):
    """_fall_back's MeasurementsWarning names the first frame outside moe_select: here the test's own call (the
    stacklevel is counted, so mutmut's trampoline frames, inside the package, are skipped too). Kills
    resolver.x__fall_back__mutmut_51 (None) and _53 (left out: 1), listed when the value was a fixed 4."""
    catalog = _rules(tmp_path, "  - id: site-order\n    when: {arch: [cpu]}\n    prefer: [torch_grouped_mm, torch_native]\n")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        R._fall_back(measured, DIFFS, catalog, False); line = inspect.currentframe().f_lineno  # noqa: E702
    got = [(w.filename, w.lineno) for w in rec if issubclass(w.category, R.MeasurementsWarning)]
    assert got == [(__file__, line)], got


def _measured_cpu_plan(monkeypatch):
    """A plan measured on another machine (this one's torch differs), for the location tests."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_measured_plans import CPU, DEP

    monkeypatch.setattr(R, "machine_here", lambda plan, env, device=None:
                        plan.measurements.machine.model_copy(update={"torch": "9.9.9"}))
    return moe_select.plan(DEP, measurements=[CPU])


def test_measurements_warning_names_resolves_caller(monkeypatch):
    """The MeasurementsWarning of a measured plan resolved off its machine points at the line that called
    ``moe_select.resolve`` or ``moe_select.resolve_layers`` (this file), not inside the resolver (a fixed 4 named
    resolver.py's own call; a fixed 5 named resolve_layers' call of resolve)."""
    p = _measured_cpu_plan(monkeypatch)
    for call in (moe_select.resolve, R.resolve_layers):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            call(p); line = inspect.currentframe().f_lineno  # noqa: E702
        got = [(w.filename, w.lineno) for w in rec if issubclass(w.category, R.MeasurementsWarning)]
        assert got == [(__file__, line)], (call.__name__, got)


def test_fall_back_refused_by_the_rules_names_their_codes(measured, tmp_path):
    """Without the table the rules refuse: the catalog given has torch_native (disabled by a site rule) and triton
    (not on the CPU: arch_unsupported) only, so the codes are arch_unsupported and disabled_by_rule, sorted, once each. Kills
    resolver.x__fall_back__mutmut_32 to _35 (the codes None, ``join(None)``, ``"XX, XX"``, ``sorted(None)``) and
    _36 to _49 (each field of the refusal: None, left out or its text changed); and _30 (the bundled catalog would
    choose torch_native, no refusal)."""
    catalog = _rules(tmp_path, "  - id: site-no-native\n    when: {arch: [cpu]}\n    disable: [torch_native]\n"
                               "    reason: site policy\n")
    catalog = dataclasses.replace(catalog, runners={k: catalog.runners[k] for k in ("torch_native", "triton")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = R._fall_back(measured, DIFFS, catalog, False)
    assert out == (None, [Reason(
        code="plan_mismatch",
        detail=_what(measured.measurements_fingerprint[:12]) + "; without them the rules refuse this deployment "
        "(arch_unsupported, disabled_by_rule)",
        source="plan (measurements.machine)", fix="measure on this machine (moe-select tune) and plan again")])


# ------------------------------------------------------------------------------------------------- fact_file
def _line_of(path: Path, key: str) -> int:
    """The 1-based line of the first top-level ``key:`` in the YAML file ``path``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(f"{key}:"))


def test_fact_file_names_the_module_line_of_a_runner_and_an_a2a_file():
    """``fact_file`` defaults to the ``module`` key's line; with ``a2a`` it reads the a2a backends (deepep is one,
    not a runner). Kills resolver.x_fact_file__mutmut_1, _2 (default key ``XXmoduleXX`` / ``MODULE``: the object's
    own line, 6 for torch_native), _11 (``a2a and False``: runners searched), _13, _14 (``XXa2aXX`` / ``A2A``: no such
    attribute), all three of which give the bundled name without a line for deepep."""
    backends, _ = bundled_dirs()
    catalog = default_catalog()
    native, deepep = backends / "torch_native.yaml", backends / "a2a" / "deepep.yaml"
    assert R.fact_file(catalog, "torch_native") == f"backends/torch_native.yaml:{_line_of(native, 'module')}"
    assert _line_of(native, "module") != 1
    assert R.fact_file(catalog, "torch_native", "registers") == f"backends/torch_native.yaml:{_line_of(native, 'registers')}"
    assert "deepep" not in catalog.runners
    assert R.fact_file(catalog, "deepep", a2a=True) == f"backends/a2a/deepep.yaml:{_line_of(deepep, 'module')}"


def test_fact_file_without_such_a_file_is_the_bundled_name():
    """Kills resolver.x_fact_file__mutmut_10 (``getattr`` without its default: AttributeError on None), _20
    (``... if (cap is not None) or True``: None.where), _23, _24 (the ``a2a/`` part never / always), _25 to _27 (its
    texts changed)."""
    assert R.fact_file(None, "torch_native") == "backends/torch_native.yaml"
    assert R.fact_file(None, "deepep", a2a=True) == "backends/a2a/deepep.yaml"
    catalog = default_catalog()
    assert R.fact_file(catalog, "no_such_runner") == "backends/no_such_runner.yaml"
    assert R.fact_file(catalog, "no_such_a2a", a2a=True) == "backends/a2a/no_such_a2a.yaml"


# --------------------------------------------------------------------------------------------- resolve_layers
def test_resolve_layers_passes_the_arguments_to_every_kind(configs):
    """A DeepSeek-V3.1 NVFP4 checkpoint, whose MTP layer stays BF16, at TP 2 on the CPU: with ``tp_rank=1`` both
    kinds' runners are rank 1's. Kills resolver.x_resolve_layers__mutmut_8 (the main kind resolved without the
    arguments: rank 0) and _12 (the other kinds without them)."""
    cpu = moe_select.plan({"arch": "auto", "model_config": str(configs / "nvidia__DeepSeek-V3.1-NVFP4"),
                           "require_adapter": True, "runner": "torch_native", "tp": 2})
    runners = moe_select.resolve_layers(cpu, tp_rank=1)
    assert {k: (r.spec.quant, r.spec.tp_rank) for k, r in runners.items()} == {"main": ("nvfp4", 1), "mtp": ("bf16", 1)}


# ------------------------------------------------------------------------------- H200 run s9 (0c2954f): _prepare
def test_resolve_asks_for_the_machine_key_of_the_device_it_was_given(monkeypatch):
    """resolve compares the table's MachineKey with the one of the device the caller names (on a machine without a
    GPU the default, the CPU, is the same key, so what measurements.this_machine is asked for is recorded; it answers
    with the table's own key, so the plan resolves as measured). Kills resolver.x__prepare__mutmut_74
    (``machine_here(p, device)``: the device taken for the environment, and this_machine asked for the default
    device, None)."""
    import sys

    import moe_select.measurements as M

    sys.path.insert(0, str(Path(__file__).parent))
    from test_measured_plans import CPU as TABLE, DEP as MEASURED_DEP

    p = moe_select.plan(MEASURED_DEP, measurements=[TABLE])
    assert p.measurements is not None and p.measurements.machine.packages == {}
    asked: list[dict[str, Any]] = []

    def this_machine(**kw: Any) -> MachineKey:
        asked.append(kw)
        return p.measurements.machine

    monkeypatch.setattr(M, "this_machine", this_machine)
    runner = moe_select.resolve(p, device="cpu", environment=p.environment, registry=Registry())
    assert runner.name == "torch_native"
    assert asked == [{"cuda_graph": False, "packages": {}, "tile_configs": None, "device": "cpu"}]


# ------------------------------------------------------------------------- H200 run s9 (0c2954f): check_environment
def test_an_edited_deployment_is_named_by_its_fingerprint():
    """A plan whose deployment was edited after planning (16 experts where it was made for 8): every other derived
    field selects the same, so the one reason is the fingerprint's, in these words. Kills
    resolver.x__replan_reasons__mutmut_83 (its detail ``XX...XX``) and _89 (its fix ``XXplan again ...XX``)."""
    p = moe_select.plan(DEP)
    model = p.deployment.model
    assert model is not None and model.num_experts == 8
    edited = p.model_copy(update={"deployment": p.deployment.model_copy(
        update={"model": model.model_copy(update={"num_experts": 16})})})
    assert R.check_environment(edited, p.environment) == [Reason(
        code="plan_mismatch", detail="fingerprint: the plan's inputs (deployment or environment) differ from those it "
        "was made for: the plan was edited after planning", source="plan", fix="plan again (moe-select plan)")]


def test_rule_files_that_no_longer_load_are_named_with_the_catalog_as_source(tmp_path):
    """A plan made with an operator's rules folder that is gone since: the catalog the plan was made with cannot be
    loaded again, and that is the one reason (no file comparison, no fresh selection without it), its source the
    catalog. Kills resolver.x_check_environment__mutmut_38 (``source=None``)."""
    rules = tmp_path / "site"
    rules.mkdir()
    (rules / "r.yaml").write_text("schema_version: 1\nrules:\n  - id: site-order\n    when: {arch: [cpu]}\n"
                                  "    prefer: [torch_grouped_mm, torch_native]\n")
    p = moe_select.plan(DEP, catalog=load_catalog([rules], use_env=False))
    assert p.rule_sources == [str(rules)]
    (rules / "r.yaml").unlink()
    rules.rmdir()
    assert R.check_environment(p, p.environment) == [Reason(
        code="plan_mismatch", detail=f"the rule/capability files no longer load: {rules}: rules file or directory not "
        "found", source="catalog")]


#: A FlashInfer CUTLASS plan for an H200 declared not prebuilt (no FlashInfer needed: nothing is built).
_FI_MODEL = {"num_experts": 128, "top_k": 8, "hidden_size": 2048, "moe_intermediate_size": 768, "activation": "silu",
             "routing": "renormalize"}


def _fi_plan() -> Plan:
    return moe_select.plan({"gpu": "H200", "quant": "bf16", "model": _FI_MODEL, "runner": "flashinfer_cutlass",
                            "engine": "moe_select", "prebuilt": {"flashinfer-python": False},
                            "packages": {"flashinfer-python": "0.6.4", "torch": "2.11.0"}})


def test_a_package_found_under_its_import_name_is_installed():
    """The plan needs flashinfer-python (import flashinfer) 0.6.4; the environment lists it under its import name
    ``flashinfer`` (as found by importing it): it is installed, so no reason. Kills
    resolver.x_check_environment__mutmut_126 (``env.package(need.name)``: looked up by the distribution name only,
    not found, dependency_missing)."""
    p = _fi_plan()
    assert [(n.name, n.module) for n in p.packages] == [("flashinfer-python", "flashinfer")]
    env = Environment(detected=True, arch="sm90", gpu="NVIDIA H200", packages={"flashinfer": "0.6.4", "torch": "2.11.0"},
                      prebuilt={"flashinfer-python": False})
    assert R.check_environment(p, env) == []


def test_require_prebuilt_names_the_prebuilt_package_to_install_when_there_is_one():
    """require_prebuilt refuses a plan that would JIT-compile; the fix names flashinfer_cutlass's prebuilt package
    (flashinfer-jit-cache, for flashinfer-python) when its capability file states one, and only the other runner
    when it does not. Kills resolver.x_check_environment__mutmut_211 (``hint = None``: the fix starts ``None``)."""
    p = _fi_plan()
    assert p.jit is not None
    env = Environment(detected=True, arch="sm90", gpu="NVIDIA H200", packages={"flashinfer-python": "0.6.4",
                      "torch": "2.11.0"}, prebuilt={"flashinfer-python": False})
    refusal = Reason(code="dependency_missing", detail=f"flashinfer_cutlass would JIT-compile at its first call and "
                     f"require_prebuilt is set: {p.jit}", source="resolve(require_prebuilt=True)",
                     fix="install flashinfer-jit-cache (matching flashinfer-python), or plan another runner")
    assert R.check_environment(p, env, require_prebuilt=True) == [refusal]
    base = default_catalog()
    cap = base.runners["flashinfer_cutlass"]
    assert cap.jit is not None and cap.jit.prebuilt_package == "flashinfer-jit-cache"
    bare = dataclasses.replace(base, runners={**base.runners, "flashinfer_cutlass": cap.model_copy(
        update={"jit": cap.jit.model_copy(update={"prebuilt_package": None})})})
    assert R.check_environment(p, env, require_prebuilt=True, catalog=bare) == [
        refusal.model_copy(update={"fix": "plan another runner"})]
