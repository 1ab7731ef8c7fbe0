#!/usr/bin/env python3
"""Writes include/lwcl/model/checkpoint/hf_module_source.hpp: tools/hf/lwcl_modeling.py as a C++ string,
which checkpoint::save_hf copies into every checkpoint folder whose shapes transformers' own classes
cannot express. With --check it writes nothing and fails (exit 1) when the header is not the module's
current text (ctest hf_module_embedded runs that).

    python3 tools/hf/embed_module.py [--check]
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODULE = os.path.join(HERE, "lwcl_modeling.py")
HEADER = os.path.join(ROOT, "include", "lwcl", "model", "checkpoint", "hf_module_source.hpp")
DELIM = "lwclpy"


def render():
    with open(MODULE, encoding="utf-8") as f:
        text = f.read()
    if ")" + DELIM + '"' in text:
        sys.exit("embed_module.py: %s holds the raw-string delimiter )%s\"" % (MODULE, DELIM))
    # Pieces of at most 8000 characters: compilers limit one string literal's length.
    pieces, rest = [], text
    while rest:
        cut = rest[:8000]
        if len(rest) > 8000:
            cut = cut[: cut.rfind("\n") + 1]
        pieces.append(cut)
        rest = rest[len(cut):]
    body = "\n".join('    R"%s(%s)%s"' % (DELIM, p, DELIM) for p in pieces)
    return ("#pragma once\n"
            "// tools/hf/lwcl_modeling.py as text, written by tools/hf/embed_module.py (do not edit: edit the module and\n"
            "// rerun the tool; ctest hf_module_embedded fails when the two differ). save_hf copies it into a\n"
            "// checkpoint folder whose shapes transformers' own classes cannot express.\n\n"
            "#include <string_view>\n\n"
            "namespace lwcl::checkpoint {\n\n"
            "inline constexpr std::string_view hf_module_file = \"lwcl_modeling.py\";\n"
            "inline constexpr std::string_view hf_module_source =\n" + body + ";\n\n"
            "}  // namespace lwcl::checkpoint\n")


def main(argv):
    text = render()
    if "--check" in argv:
        current = open(HEADER, encoding="utf-8").read() if os.path.exists(HEADER) else ""
        if current != text:
            print("embed_module.py: %s is not tools/hf/lwcl_modeling.py's current text; run "
                  "python3 tools/hf/embed_module.py" % HEADER)
            return 1
        print("embed_module.py: the embedded module is current")
        return 0
    tmp = HEADER + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, HEADER)
    print("embed_module.py: wrote %s" % HEADER)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
