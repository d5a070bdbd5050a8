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
  Dataset's encryptOptions): Fluid gives the path of a file holding the value;
  its content becomes AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
  AWS_SESSION_TOKEN (or ALIBABA_CLOUD_* for oss:// sources).
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
            name = SECRET_KEYS[k][1 if oss else 0]
            try:
                with open(v) as f:
                    env[name] = f.read().strip()
            except OSError as e:
                die("encryptOption %s: cannot read %s: %s" % (k, v, e.strerror))
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
