"""gotmpl — a renderer for the subset of Go's text/template (and of Helm's
functions) that helm/feedfs uses, so the chart renders in tests on machines
with no helm binary.

DESIGN
  Lexing splits the text at "{{" / "}}" (with "{{-" / "-}}" trimming the
  whitespace next to them, comments "{{/* */}}" dropped); parsing builds a
  tree of text, actions, if / else if / else, range (lists, and maps in
  sorted key order, as Go does), with, define, template; evaluation walks it
  with Go's rules where the chart depends on them:
    - truth: false, 0, nil, "", empty list or map are false;
    - a field of a map that lacks it is nil, and a field of nil is an error
      (helm fails the same way: "nil pointer evaluating interface {}.x");
    - variables are scoped to the control structure that declares them,
      `$` is the top-level data, `=` assigns to an existing variable;
    - pipelines pass their value as the last argument of the next command.
  Functions are those of Helm and sprig the chart calls (FUNCS below); any
  other name is an error, so a template cannot silently use one this file
  does not implement. What helm does that this does not: .Capabilities,
  .Files, lookup, tpl, and the rest of sprig. Output of toYaml is PyYAML's
  block style with sorted keys, as sigs.k8s.io/yaml sorts them.
"""

import base64
import json
import os
import re

import yaml


class TemplateError(Exception):
    pass


# ---------------------------------------------------------------- lexing

_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.S)


def _split(src):
    """[('text', s) | ('action', body)] with trim markers applied."""
    out, pos, trim_next = [], 0, False
    for m in _ACTION.finditer(src):
        text = src[pos:m.start()]
        if trim_next:
            text = text.lstrip(" \t\r\n")
        if m.group(1):
            text = text.rstrip(" \t\r\n")
        out.append(("text", text))
        body = m.group(2).strip()
        if not (body.startswith("/*") and body.endswith("*/")):
            out.append(("action", body))
        trim_next = bool(m.group(3))
        pos = m.end()
    text = src[pos:]
    out.append(("text", text.lstrip(" \t\r\n") if trim_next else text))
    return out


_TOKEN = re.compile(r"""
    (?P<str>"(?:[^"\\]|\\.)*") | (?P<raw>`[^`]*`) |
    (?P<num>-?\d+(?:\.\d+)?) |
    (?P<decl>:=) | (?P<assign>=) | (?P<pipe>\|) | (?P<lp>\() | (?P<rp>\)) | (?P<comma>,) |
    (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*) |
    (?P<field>(?:\.[A-Za-z0-9_]+)+|\.) |
    (?P<ident>[A-Za-z_][A-Za-z0-9_]*) |
    (?P<ws>\s+)
""", re.X)


def _tokens(body):
    out, pos = [], 0
    while pos < len(body):
        m = _TOKEN.match(body, pos)
        if not m:
            raise TemplateError("cannot lex %r at %r" % (body, body[pos:]))
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            continue
        val = m.group(kind)
        if kind == "str":
            val = json.loads(val)
        elif kind == "raw":
            kind, val = "str", val[1:-1]
        elif kind == "num":
            val = float(val) if "." in val else int(val)
        out.append((kind, val))
    return out


# ---------------------------------------------------------------- parsing
# Nodes: ("text", s) ("out", pipe) ("if", [(pipe, body)...], else_body)
# ("range", vars, pipe, body, else_body) ("with", pipe, body, else_body)
# ("template", name, pipe)    pipe: (decl_vars, op, [commands]); command: [operands]

def _parse_pipe(toks):
    decl, op = [], None
    for i, (k, _v) in enumerate(toks):
        if k in ("decl", "assign"):
            names = [v for kk, v in toks[:i] if kk == "var"]
            if not names or any(kk not in ("var", "comma") for kk, _ in toks[:i]):
                raise TemplateError("bad declaration %r" % (toks,))
            decl, op, toks = names, k, toks[i + 1:]
            break
    cmds, cur, i = [], [], 0

    def operand(i):
        """One operand at toks[i]; a parenthesized pipeline becomes ("paren", pipe)."""
        k, v = toks[i]
        if k == "lp":
            depth, j = 1, i + 1
            while j < len(toks) and depth:
                depth += {"lp": 1, "rp": -1}.get(toks[j][0], 0)
                j += 1
            if depth:
                raise TemplateError("unclosed ( in %r" % (toks,))
            return ("paren", _parse_pipe(toks[i + 1:j - 1])), j
        return (k, v), i + 1

    while i < len(toks):
        if toks[i][0] == "pipe":
            if not cur:
                raise TemplateError("empty command in pipeline")
            cmds.append(cur)
            cur = []
            i += 1
            continue
        node, i = operand(i)
        cur.append(node)
    if cur:
        cmds.append(cur)
    if not cmds:
        raise TemplateError("empty pipeline")
    return (decl, op, cmds)


def _parse(items, pos, stop):
    """Parse until an action whose keyword is in stop; returns (nodes, pos, keyword, rest)."""
    nodes = []
    while pos < len(items):
        kind, val = items[pos]
        pos += 1
        if kind == "text":
            if val:
                nodes.append(("text", val))
            continue
        word = val.split(None, 1)
        kw, rest = (word[0], word[1] if len(word) > 1 else "") if word else ("", "")
        if kw in stop:
            return nodes, pos, kw, rest
        if kw == "if":
            branches, cond = [], rest
            while True:
                body, pos, end_kw, end_rest = _parse(items, pos, ("else", "end"))
                branches.append((_parse_pipe(_tokens(cond)), body))
                if end_kw == "end":
                    nodes.append(("if", branches, []))
                    break
                if end_rest.startswith("if "):
                    cond = end_rest[3:]
                    continue
                else_body, pos, _, _ = _parse(items, pos, ("end",))
                nodes.append(("if", branches, else_body))
                break
        elif kw in ("range", "with"):
            body, pos, end_kw, _ = _parse(items, pos, ("else", "end"))
            else_body = []
            if end_kw == "else":
                else_body, pos, _, _ = _parse(items, pos, ("end",))
            pipe = _parse_pipe(_tokens(rest))
            nodes.append((kw, pipe, body, else_body))
        elif kw == "define":
            name = _tokens(rest)[0][1]
            body, pos, _, _ = _parse(items, pos, ("end",))
            nodes.append(("define", name, body))
        elif kw == "template":
            t = _tokens(rest)
            nodes.append(("template", t[0][1], _parse_pipe(t[1:]) if len(t) > 1 else None))
        elif kw in ("end", "else"):
            raise TemplateError("unexpected {{%s}}" % kw)
        else:
            nodes.append(("out", _parse_pipe(_tokens(val))))
    if stop:
        raise TemplateError("missing {{end}}")
    return nodes, pos, None, None


# ---------------------------------------------------------------- evaluation

def truth(v):
    """Go's template truth: false, 0, nil and empty strings, lists and maps are false."""
    if v is None or v is False:
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v != 0
    if isinstance(v, (str, list, dict)):
        return len(v) > 0
    return True


def _go_str(v):
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        return json.dumps(v)      # Go prints map[...]: templates must not rely on it
    return str(v)


def _to_yaml(v):
    if v is None:
        return "null"
    return yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n")


def _indent(n, s):
    pad = " " * int(n)
    return "\n".join(pad + line if line else line for line in _go_str(s).split("\n"))


def _printf(fmt, *args):
    out, it = [], iter(args)

    def conv(m):
        spec = m.group(1)
        if spec == "%":
            return "%"
        a = next(it)
        if spec == "q":
            return json.dumps(_go_str(a))
        if spec == "d":
            return str(int(a))
        return _go_str(a)
    return re.sub(r"%([svdq%])", conv, fmt)


def _index(v, keys):
    for k in keys:
        v = v[k] if isinstance(v, list) else v.get(k)
    return v


def _required(msg, v):
    if v is None or v == "":
        raise TemplateError("required: " + msg)
    return v


def _fail(msg):
    raise TemplateError("fail: " + msg)


FUNCS = {
    "quote": lambda *a: " ".join(json.dumps(_go_str(x)) for x in a),
    "squote": lambda *a: " ".join("'%s'" % _go_str(x) for x in a),
    "default": lambda d, v=None: v if truth(v) else d,
    "required": _required,
    "fail": _fail,
    "toYaml": _to_yaml,
    "toJson": lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")),
    "nindent": lambda n, s: "\n" + _indent(n, s),
    "indent": _indent,
    "printf": _printf,
    "print": lambda *a: "".join(_go_str(x) for x in a),
    "eq": lambda a, *b: any(a == x for x in b),
    "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b,
    "not": lambda v: not truth(v),
    "empty": lambda v: not truth(v),
    "add": lambda *a: sum(int(x) for x in a),
    "sub": lambda a, b: int(a) - int(b),
    "int": lambda v: int(v),
    "toString": _go_str,
    "trunc": lambda n, s: s[:int(n)],
    "trimSuffix": lambda suf, s: s[:-len(suf)] if suf and s.endswith(suf) else s,
    "trimPrefix": lambda pre, s: s[len(pre):] if pre and s.startswith(pre) else s,
    "replace": lambda old, new, s: s.replace(old, new),
    "lower": lambda s: s.lower(),
    "upper": lambda s: s.upper(),
    "hasPrefix": lambda pre, s: s.startswith(pre),
    "contains": lambda sub, s: sub in s,
    "hasKey": lambda d, k: k in d,
    "len": lambda v: len(v),
    "index": lambda v, *keys: _index(v, keys),
    "join": lambda sep, v: sep.join(_go_str(x) for x in v),
    "list": lambda *a: list(a),
    "dict": lambda *a: {a[i]: a[i + 1] for i in range(0, len(a), 2)},
    "b64enc": lambda s: base64.b64encode(_go_str(s).encode()).decode(),
    "ternary": lambda a, b, c: a if truth(c) else b,
}


class _Scope:
    def __init__(self, parent=None, **kv):
        self.parent, self.vars = parent, dict(kv)

    def get(self, name):
        s = self
        while s:
            if name in s.vars:
                return s.vars[name]
            s = s.parent
        raise TemplateError("undefined variable %s" % name)

    def set(self, name, v):
        s = self
        while s:
            if name in s.vars:
                s.vars[name] = v
                return
            s = s.parent
        raise TemplateError("assignment to undeclared %s" % name)


def _field(v, names, what):
    for n in names:
        if v is None:
            raise TemplateError("nil pointer evaluating %s" % what)
        if isinstance(v, dict):
            v = v.get(n)
        else:
            raise TemplateError("can't evaluate field %s in %s" % (n, what))
    return v


class Renderer:
    def __init__(self):
        self.defines = {}

    def load(self, src):
        nodes, _, _, _ = _parse(_split(src), 0, ())
        self._collect(nodes)
        return nodes

    def _collect(self, nodes):
        for n in nodes:
            if n[0] == "define":
                self.defines[n[1]] = n[2]

    def include(self, name, dot):
        if name not in self.defines:
            raise TemplateError("no template %r" % name)
        return self._run(self.defines[name], dot, _Scope(None, **{"$": dot}))

    def render(self, nodes, dot):
        return self._run(nodes, dot, _Scope(None, **{"$": dot}))

    def _run(self, nodes, dot, scope):
        out = []
        for n in nodes:
            k = n[0]
            if k == "text":
                out.append(n[1])
            elif k == "define":
                pass
            elif k == "out":
                v = self._pipe(n[1], dot, scope)
                if not n[1][0]:
                    out.append(_go_str(v))
            elif k == "if":
                inner = _Scope(scope)
                for pipe, body in n[1]:
                    if truth(self._pipe(pipe, dot, inner)):
                        out.append(self._run(body, dot, inner))
                        break
                else:
                    out.append(self._run(n[2], dot, inner))
            elif k == "with":
                inner = _Scope(scope)
                v = self._pipe(n[1], dot, inner)
                out.append(self._run(n[2], v, inner) if truth(v) else
                           self._run(n[3], dot, inner))
            elif k == "range":
                decl, _op, cmds = n[1]
                inner = _Scope(scope)
                v = self._pipe(([], None, cmds), dot, inner)
                items = (sorted(v.items()) if isinstance(v, dict) else
                         list(enumerate(v or [])))
                if not items:
                    out.append(self._run(n[3], dot, inner))
                for key, item in items:
                    it = _Scope(inner)
                    if len(decl) == 1:
                        it.vars[decl[0]] = item
                    elif len(decl) == 2:
                        it.vars[decl[0]], it.vars[decl[1]] = key, item
                    out.append(self._run(n[2], item, it))
            elif k == "template":
                sub = self._pipe(n[2], dot, scope) if n[2] else None
                out.append(self.include(n[1], sub))
        return "".join(out)

    def _operand(self, o, dot, scope):
        k, v = o
        if k == "field":
            return dot if v == "." else _field(dot, v[1:].split("."), v)
        if k == "var":
            parts = v.split(".")
            return _field(scope.get(parts[0]), parts[1:], v)
        if k in ("str", "num"):
            return v
        if k == "paren":
            return self._pipe(v, dot, scope)
        if k == "ident":
            if v in ("true", "false"):
                return v == "true"
            if v == "nil":
                return None
            return self._call(v, [], dot, scope)
        raise TemplateError("unexpected %r" % (o,))

    def _call(self, name, args, dot, scope):
        if name == "include":
            return self.include(args[0], args[1] if len(args) > 1 else None)
        if name == "and":
            r = True
            for a in args:
                r = a
                if not truth(a):
                    return a
            return r
        if name == "or":
            for a in args:
                if truth(a):
                    return a
            return args[-1] if args else None
        if name not in FUNCS:
            raise TemplateError("function %r not defined" % name)
        try:
            return FUNCS[name](*args)
        except TemplateError:
            raise
        except Exception as e:      # wrong arity or types: helm would fail too
            raise TemplateError("%s%r: %s" % (name, tuple(args), e))

    def _pipe(self, pipe, dot, scope):
        decl, op, cmds = pipe
        val, have = None, False
        for cmd in cmds:
            head, rest = cmd[0], cmd[1:]
            args = [self._operand(o, dot, scope) for o in rest]
            if have:
                args.append(val)
            if head[0] == "ident" and head[1] not in ("true", "false", "nil"):
                val = self._call(head[1], args, dot, scope)
            else:
                if args:
                    raise TemplateError("%r is not a function" % (head,))
                val = self._operand(head, dot, scope)
            have = True
        if decl:
            if op == "decl":
                scope.vars[decl[0]] = val
            else:
                scope.set(decl[0], val)
        return val


def deep_merge(base, over):
    out = dict(base)
    for k, v in (over or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def render_chart(chart_dir, values=None, release="feedfs", namespace="default"):
    """{template file name: rendered text} for a chart, like `helm template`."""
    with open(os.path.join(chart_dir, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        vals = deep_merge(yaml.safe_load(f) or {}, values)
    top = {
        "Values": vals,
        "Release": {"Name": release, "Namespace": namespace, "Service": "Helm",
                    "IsInstall": True, "IsUpgrade": False, "Revision": 1},
        "Chart": {"Name": chart["name"], "Version": chart["version"],
                  "AppVersion": chart.get("appVersion", "")},
    }
    r = Renderer()
    tdir = os.path.join(chart_dir, "templates")
    names = sorted(os.listdir(tdir))
    trees = {}
    for n in names:          # helpers first: every file's defines are visible to all
        with open(os.path.join(tdir, n)) as f:
            trees[n] = r.load(f.read())
    # helm renders NOTES.txt after the manifests
    order = sorted((n for n in trees if not n.startswith("_")), key=lambda n: (n == "NOTES.txt", n))
    return {n: r.render(trees[n], top) for n in order}
