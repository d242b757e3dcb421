"""Does the installed ``deep_gemm`` run on this GPU at all? (issue 26)

Calls DeepGEMM's two sm90 M-grouped contiguous GEMMs directly, with operands laid out as DeepGEMM's own test
generator builds them (sgl-project/DeepGEMM tests/generators.py:generate_m_grouped_contiguous: A ``[M, K]``, B
``[G, N, K]``, D ``[M, N]`` bf16, a per-row int32 group index with -1 on padding rows, each group's rows padded to
``get_mk_alignment_for_contiguous_layout()``), and compares each group's rows with a float64 product. No code of
this project is involved, so a failure here is DeepGEMM's build or runtime, not our adapter.

- bf16: ``m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)``.
- fp8 (1x128 activation and 128x128 weight block scales, float32): operands quantized here per block to e4m3,
  the weight scales passed through ``transform_sf_into_required_layout`` as the adapter does.

Prints one JSON object (and writes it to ``--out``): per case ``ok``, the relative Frobenius error against the
float64 product of the dequantized operands, and the error text when a call raised. Exit status 0 when every case
ran and met its tolerance (bf16 1e-2, fp8 2e-2 relative: bf16 output rounding, and DeepGEMM's FP8 accumulation).
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback


def _case(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - report any failure of the library
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--m-per-group", type=int, default=200)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--k", type=int, default=1024)
    args = ap.parse_args()

    import torch
    import deep_gemm as dg

    torch.manual_seed(0)
    g_n, n, k = args.groups, args.n, args.k
    align = dg.get_mk_alignment_for_contiguous_layout()
    ms = [args.m_per_group + 37 * i for i in range(g_n)]
    aligned = [(m + align - 1) // align * align for m in ms]
    m_tot = sum(aligned)
    dev = "cuda"
    a32 = torch.randn(m_tot, k, device=dev)
    b32 = torch.randn(g_n, n, k, device=dev) / k ** 0.5
    layout = torch.full((m_tot,), -1, dtype=torch.int32, device=dev)
    rows = []
    start = 0
    for i, (m, am) in enumerate(zip(ms, aligned)):
        layout[start:start + m] = i
        a32[start + m:start + am] = 0
        rows.append((i, start, start + m))
        start += am

    def rel(d, a_ref, b_ref):
        num = den = 0.0
        for i, s, e in rows:
            ref = a_ref[s:e].double() @ b_ref[i].double().t()
            num += float((d[s:e].double() - ref).pow(2).sum())
            den += float(ref.pow(2).sum())
        return (num / den) ** 0.5

    out = {"deep_gemm": getattr(dg, "__file__", "?"), "torch": torch.__version__, "align": align,
           "shape": {"groups": g_n, "m": m_tot, "n": n, "k": k}}

    def bf16():
        a, b = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
        d = torch.empty(m_tot, n, device=dev, dtype=torch.bfloat16)
        dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, layout)
        torch.cuda.synchronize()
        e = rel(d, a, b)
        return {"ok": e < 1e-2, "rel_err": e}

    def fp8():
        fp8_t = torch.float8_e4m3fn
        # activations: 1x128 groups along K; weights: 128x128 blocks
        ag = a32.view(m_tot, k // 128, 128)
        sa = (ag.abs().amax(-1).clamp_min(1e-4) / 448.0)
        aq = (ag / sa[..., None]).to(fp8_t).view(m_tot, k)
        bb = b32.view(g_n, n // 128, 128, k // 128, 128)
        sb = (bb.abs().amax((2, 4)).clamp_min(1e-4) / 448.0)
        bq = (bb / sb[:, :, None, :, None]).to(fp8_t).view(g_n, n, k)
        a_deq = (aq.float().view(m_tot, k // 128, 128) * sa[..., None]).view(m_tot, k)
        b_deq = (bq.float().view(g_n, n // 128, 128, k // 128, 128) * sb[:, :, None, :, None]).view(g_n, n, k)
        sb_t = dg.transform_sf_into_required_layout(sb.contiguous(), n, k, (1, 128, 128), g_n, False)
        d = torch.empty(m_tot, n, device=dev, dtype=torch.bfloat16)
        dg.m_grouped_fp8_fp4_gemm_nt_contiguous((aq, sa.contiguous()), (bq, sb_t), d, layout)
        torch.cuda.synchronize()
        e = rel(d, a_deq, b_deq)
        return {"ok": e < 2e-2, "rel_err": e}

    out["bf16"] = _case(bf16)
    out["fp8_block"] = _case(fp8)
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0 if out["bf16"].get("ok") and out["fp8_block"].get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
