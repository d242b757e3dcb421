"""What a format's row lets this install do with a plan's weights (torch-free): make them ready at all
(:func:`format_reasons`: a format without a row has no scales and no tolerance) and generate seeded test weights to
check a runner against the float64 reference (:func:`weights_refusal`, for ``verify``, ``moe-select run`` and
``run --nproc``). The rows are ``backends/formats.yaml`` (:mod:`moe_select.formats`)."""
from __future__ import annotations

from .plans import Reason


def format_reasons(quant: str) -> list[Reason]:
    """Why a plan in format ``quant`` cannot be made ready here: ``no_adapter`` when the format has no row in
    the formats table (``backends/formats.yaml``: no scales, no tolerance, so no runner's weights can be
    shaped, dequantized or checked here; the plan itself is ``unverified``), else nothing."""
    from .formats import FILE_NAME, missing_row

    why = missing_row(quant)
    if why is None:
        return []
    return [Reason(code="no_adapter", detail=why, source=f"backends/{FILE_NAME}",
                   fix=f"give {quant} a row in backends/{FILE_NAME} (README, Hand-edited files to add (b)), or use a "
                       "format that has one")]


def weights_refusal(quant: str, who: str) -> Reason | None:
    """Why ``who`` (``moe-select run``, ``verify``, ``run --nproc``) cannot make seeded test weights of format
    ``quant`` and check a runner against the float64 reference: ``no_adapter`` for a name without a row
    (:func:`format_reasons`), ``quant_unsupported`` for a format whose row says the harness does not generate
    it (``generated: false``: int8_w8a8, the weight-only int formats, mxfp8); None when it can."""
    from .formats import lookup, names

    found = format_reasons(quant)
    if found:
        return found[0].model_copy(update={"detail": f"{who}: {found[0].detail}"})
    row = lookup(quant)
    if row is not None and not row.generated:
        made = ", ".join(n for n in names() if (r := lookup(n)) is not None and r.generated)
        return Reason(code="quant_unsupported", detail=f"{who}: cannot generate {quant} test weights (it makes {made})",
                      source=row.where("generated"),
                      fix="resolve without verify=True, and check this runner another way")
    return None
