#!/usr/bin/env bash
# Build DeepGEMM's tvm-ffi extension (_C.so) against the torch of THIS machine (issue 26).
#
# Why: the sgl-deep-gemm 0.1.7 wheel ships a _C.so prebuilt against another torch; on the H200 (torch 2.11) its first
# tensor checks misread the tensors (benchmarks/README.md, "deep_gemm (issue 26)"). DeepGEMM's own loader builds _C
# from csrc/tvm_ffi_api.cpp with tvm_ffi.cpp.build when no _C.so is present (sgl-project/DeepGEMM
# sgl_deep_gemm/__init__.py:_build_module); this script runs the same compile with g++ directly (no ninja).
#
#   stage  SRC DEST WHEEL_INCLUDE   on the CPU machine: lay out DEST as the sgl-deep-gemm wheel does
#                                   (build_sgl_deep_gemm.sh): DEST/deep_gemm/{__init__.py,utils,testing,legacy,mega,include}
#                                   and DEST/csrc, from a DeepGEMM checkout SRC (git archive of sgl-project/DeepGEMM) and
#                                   the cute/cutlass headers of an unpacked wheel's deep_gemm/include.
#   build  DEST                     on the GPU machine: compile DEST/deep_gemm/_C.so (torch, CUDA, tvm-ffi of this
#                                   python3); then PYTHONPATH=DEST imports it as `deep_gemm` (no sgl-deep-gemm
#                                   distribution, so backends/deep_gemm_moe.py does not apply the wheel's runtime check).
set -euo pipefail
cmd=${1:?stage|build}
if [[ $cmd == stage ]]; then
    src=${2:?SRC}; dest=${3:?DEST}; winc=${4:?WHEEL_INCLUDE}
    rm -rf "$dest"; mkdir -p "$dest/deep_gemm/include"
    cp "$src/sgl_deep_gemm/__init__.py" "$dest/deep_gemm/"
    for sub in utils testing legacy mega; do cp -r "$src/deep_gemm/$sub" "$dest/deep_gemm/"; done
    cp -r "$src/deep_gemm/include/deep_gemm" "$dest/deep_gemm/include/"
    cp -r "$winc/cute" "$winc/cutlass" "$dest/deep_gemm/include/"
    cp -r "$src/csrc" "$dest/csrc"
    git -C "$src" rev-parse HEAD > "$dest/SOURCE_COMMIT" 2>/dev/null || true
    exit 0
fi
dest=${2:?DEST}
read -r torch_dir py_inc tvm_inc dl_inc tvm_lib < <(python3 - <<'PY'
import os, sysconfig, torch, tvm_ffi.libinfo as li
print(os.path.dirname(torch.__file__), sysconfig.get_path("include"), li.find_include_path(),
      li.find_dlpack_include_path(), os.path.dirname(li.find_libtvm_ffi()))
PY
)
cuda=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
abi=$(python3 -c "import torch; print(int(torch.compiled_with_cxx11_abi()))")
set -x
c++ -std=c++17 -O2 -fPIC -shared -Wno-psabi -Wno-deprecated-declarations -D_GLIBCXX_USE_CXX11_ABI="$abi" \
    -I"$tvm_inc" -I"$dl_inc" -I"$cuda/include" -I"$cuda/include/cccl" -I"$py_inc" -I"$torch_dir/include" \
    -I"$torch_dir/include/torch/csrc/api/include" -I"$dest/deep_gemm/include" \
    "$dest/csrc/tvm_ffi_api.cpp" -o "$dest/deep_gemm/_C.so" \
    -L"$tvm_lib" -ltvm_ffi -L"$cuda/lib64" -lcudart -lnvrtc -lcublasLt -lcublas \
    -L"$torch_dir/lib" -ltorch -ltorch_cpu -lc10 -lc10_cuda -ltorch_cuda \
    -Wl,-rpath,"$tvm_lib" -Wl,-rpath,"$torch_dir/lib" -Wl,-rpath,"$cuda/lib64"
