"""doc_example.py NAME — print docs/PYTHON.md's complete example NAME (the
```python block that starts with "# feedfs example: NAME"), so that the demo
runs the code the documentation shows, not a copy of it."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    with open(os.path.join(ROOT, "docs", "PYTHON.md")) as f:
        for block in f.read().split("```python\n")[1:]:
            code = block.split("```", 1)[0]
            if code.startswith("# feedfs example: %s\n" % sys.argv[1]):
                sys.stdout.write(code)
                return 0
    print("doc_example.py: no example %r in docs/PYTHON.md" % sys.argv[1], file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
