"""cuda_library: compile .cu files with the local nvcc and wrap them in a cc_library.

    load("//third_party/cuda:cuda.bzl", "cuda_library")
    load("@cuda//:config.bzl", "CUDA_AVAILABLE")

nvcc flags: -O3 -std=c++17 --fmad=false -Xcompiler -fPIC,-ffp-contract=off -ccbin <system g++>,
plus -I/-isystem/-D from `deps` (CcInfo) and `nvcc_flags` (e.g. -gencode ...).
Without CUDA the target is marked incompatible, so `bazel build //...` skips it.
"""

load("@cuda//:config.bzl", "CCBIN", "CUDA_AVAILABLE", "NVCC")

_NVCC_FLAGS = ["-O3", "-std=c++17", "--fmad=false", "-Xcompiler", "-fPIC,-ffp-contract=off"]

def _nvcc_compile_impl(ctx):
    cc = cc_common.merge_cc_infos(
        cc_infos = [d[CcInfo] for d in ctx.attr.deps],
    ).compilation_context
    args = _NVCC_FLAGS + ["-ccbin", CCBIN, "-I.", "-I" + ctx.bin_dir.path]
    args += ["-I" + p for p in cc.quote_includes.to_list() + cc.includes.to_list()]
    for p in cc.system_includes.to_list():
        args += ["-isystem", p]
    args += ["-D" + d for d in cc.defines.to_list()]
    args += ctx.attr.nvcc_flags
    inputs = depset(ctx.files.hdrs, transitive = [cc.headers])
    outs = []
    for src in ctx.files.srcs:
        # .pic.o: Bazel then uses the object for both static and dynamic (test) links.
        out = ctx.actions.declare_file("_nvcc/%s/%s.pic.o" % (ctx.label.name, src.basename.rsplit(".", 1)[0]))
        ctx.actions.run(
            executable = NVCC,
            arguments = args + ["-c", src.path, "-o", out.path],
            inputs = depset([src], transitive = [inputs]),
            outputs = [out],
            env = {"PATH": "/usr/bin:/bin", "TMPDIR": out.dirname},
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s" % src.short_path,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

_nvcc_compile = rule(
    implementation = _nvcc_compile_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "nvcc_flags": attr.string_list(),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], nvcc_flags = [], **kwargs):
    """cc_library `name` holding the nvcc-compiled objects of `srcs` (+ @cuda//:cudart)."""
    if not CUDA_AVAILABLE:
        native.cc_library(
            name = name,
            hdrs = hdrs,
            deps = deps,
            target_compatible_with = ["@platforms//:incompatible"],
            **kwargs
        )
        return
    _nvcc_compile(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@cuda//:cuda_headers"],
        nvcc_flags = nvcc_flags,
        visibility = ["//visibility:private"],
        tags = kwargs.get("tags", []),
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_nvcc"],
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        **kwargs
    )
