"""One notebook lab: its C++ program, named like its folder, and the notebook's PyTorch code beside it."""

def lab_binary(name, srcs = ["lab.cc"], deps = [], data = []):
    """cc_binary `name` (public: tests run it) linked with the shared lab library; exports reference.py."""
    native.exports_files(["reference.py"])
    native.cc_binary(
        name = name,
        srcs = srcs,
        data = data,
        visibility = ["//visibility:public"],
        deps = ["//notebooks_ported/lab", "//src:ddplab", "@fmt"] + deps,
    )
