#!/usr/bin/env python3
"""render.py CHART [-f VALUES.yaml]... [--set-json JSON] [--name R] [--namespace NS]

What `helm template` prints, for a machine without helm: every template of
CHART rendered with gotmpl.py (NOTES.txt last, as a comment block).

  /usr/bin/python3 tests/helm/render.py helm/feedfs -f my-values.yaml
"""
import argparse
import json
import os
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gotmpl import TemplateError, deep_merge, render_chart  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("chart")
    ap.add_argument("-f", "--values", action="append", default=[])
    ap.add_argument("--set-json", default=None, help="values as one JSON object")
    ap.add_argument("--name", default="feedfs")
    ap.add_argument("--namespace", default="default")
    a = ap.parse_args()
    vals = {}
    for p in a.values:
        with open(p) as f:
            vals = deep_merge(vals, yaml.safe_load(f) or {})
    if a.set_json:
        vals = deep_merge(vals, json.loads(a.set_json))
    try:
        out = render_chart(a.chart, vals, release=a.name, namespace=a.namespace)
    except TemplateError as e:
        sys.exit("render.py: %s" % e)
    for name, text in out.items():
        if name == "NOTES.txt":
            print("# NOTES.txt\n" + "\n".join("# " + line for line in text.strip().split("\n")))
        elif text.strip():
            print("---\n# Source: %s" % name)
            print(text.strip("\n"))


if __name__ == "__main__":
    main()
