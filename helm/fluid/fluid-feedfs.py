#!/usr/bin/env python3
"""fluid-feedfs — the entrypoint of a Fluid ThinRuntime FUSE pod running feedfs
(helm/fluid/thinruntimeprofile.yaml).

Fluid writes the Dataset and ThinRuntime into /etc/fluid/config/config.json
(FLUID_CONFIG overrides the path; Fluid before 1.1 used /etc/fluid/config.json,
read when the first is absent). From it this takes:
  targetPath                  where to mount (Fluid exposes it to the pods)
  mounts[0].mountPoint        the feedfs source: s3://BUCKET/PREFIX, oss://...
  mounts[0].options           feedfs long options, "name": "value" ("" or
                              "true" for a flag, "false" to leave it out),
                              after the ThinRuntime's runtimeOptions
  access-key-id, secret-access-key, session-token (in those options, from the
  Dataset's encryptOptions) become AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  AWS_SESSION_TOKEN (or ALIBABA_CLOUD_* for oss:// sources). Fluid hands them
  over in one of two ways, and both are taken:
    - by default (THIN_FUSE_CONFIG_STORAGE=configmap in Fluid's controller),
      the path of a file holding the value, /etc/fluid/secrets/SECRET/KEY
      (the Secret mounted in the FUSE pod); its content is the value;
    - with THIN_FUSE_CONFIG_STORAGE=secret, the value itself, inline (the
      config.json is then a Secret).
  A value under /etc/fluid/secrets/ (FLUID_SECRETS_DIR overrides it), or the
  path of an existing file, is read; anything else is the value. A secret's
  value is never printed, not even in an error.
It then execs feedfs-node (the checks of the node image, one line each), which
execs feedfs in the foreground. One Dataset mount per runtime: a second one is
refused with one line. --print writes the command and the credential variable
names as JSON instead (tests).
"""

import json
import os
import sys

PROG = "fluid-feedfs"
CONFIGS = ("/etc/fluid/config/config.json", "/etc/fluid/config.json")
SECRETS_DIR = "/etc/fluid/secrets"      # where Fluid mounts the Secrets of encryptOptions
SECRET_KEYS = {
    "access-key-id": ("AWS_ACCESS_KEY_ID", "ALIBABA_CLOUD_ACCESS_KEY_ID"),
    "secret-access-key": ("AWS_SECRET_ACCESS_KEY", "ALIBABA_CLOUD_ACCESS_KEY_SECRET"),
    "session-token": ("AWS_SESSION_TOKEN", "ALIBABA_CLOUD_SECURITY_TOKEN"),
}


def die(msg):
    sys.stderr.write("%s: %s\n" % (PROG, msg))
    sys.exit(1)


def load_config():
    paths = [os.environ["FLUID_CONFIG"]] if os.environ.get("FLUID_CONFIG") else list(CONFIGS)
    for p in paths:
        try:
            with open(p) as f:
                text = f.read()
        except FileNotFoundError:
            continue
        except OSError as e:
            die("cannot read %s: %s" % (p, e.strerror))
        try:
            return json.loads(text)
        except ValueError as e:
            die("%s is not JSON: %s" % (p, e))
    die("no Fluid config at %s" % " or ".join(paths))


def secret_value(name, v):
    """The value of encryptOption name: the content of the file v names when v
    is a path Fluid gives (under its secrets dir) or an existing file, else v
    itself (Fluid inlined it)."""
    v = "" if v is None else str(v)
    root = os.environ.get("FLUID_SECRETS_DIR") or SECRETS_DIR
    if v.startswith(root.rstrip("/") + "/") or (v.startswith("/") and os.path.isfile(v)):
        try:
            with open(v) as f:
                return f.read().strip()
        except OSError as e:
            die("encryptOption %s: cannot read %s: %s" % (name, v, e.strerror))
    if not v:
        die("encryptOption %s is empty" % name)
    return v


def command(cfg):
    """(argv, {env name: value}) for the config."""
    target = cfg.get("targetPath")
    mounts = cfg.get("mounts") or []
    if not target:
        die("the Fluid config has no targetPath")
    if len(mounts) != 1:
        die("the Dataset has %d mounts; feedfs serves one per ThinRuntime" % len(mounts))
    m = mounts[0]
    source = m.get("mountPoint", "")
    if not source:
        die("the Dataset's mount has no mountPoint (s3://BUCKET/PREFIX)")
    opts = {}
    for group in (cfg.get("runtimeOptions") or {}, m.get("options") or {}):
        for k, v in group.items():
            opts[k.replace("_", "-")] = v
    oss = source.startswith("oss://")
    env, args = {}, []
    for k, v in opts.items():
        if k in SECRET_KEYS:
            env[SECRET_KEYS[k][1 if oss else 0]] = secret_value(k, v)
            continue
        v = "" if v is None else str(v)
        if v.lower() == "false":
            continue
        args.append("--" + k)
        if v and v.lower() != "true":
            args.append(v)
    return [os.environ.get("FEEDFS_NODE", "feedfs-node"), source, target] + args, env


def main():
    argv, env = command(load_config())
    if "--print" in sys.argv[1:]:
        print(json.dumps({"argv": argv, "env": sorted(env)}))
        return
    os.environ.update(env)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        die("cannot run %s: %s" % (argv[0], e.strerror))


if __name__ == "__main__":
    main()
