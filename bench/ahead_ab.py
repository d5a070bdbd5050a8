#!/usr/bin/python3
"""bench/ahead_ab.py — readahead across files, two binaries side by side.

    bench/ahead_ab.py OLD_BIN NEW_BIN [LATENCY_MS]

Over the `make demo` dataset (build/demo/s3rver-data: 3,000 images of ~110 KiB
in 20 class folders; run `make demo` once first), behind bench/proxy.py holding
back every response's first byte LATENCY_MS (default 20), each binary mounts
the bucket, drops the page cache, and 8 threads read every image in walk
(listing) order. Two rounds, alternating. Prints files/s. Timing only.
Needs root (drop_caches, mounts).
"""
import os, subprocess, sys, time, threading, socket
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if len(sys.argv) < 3:
    raise SystemExit(__doc__)
OLD, NEW = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
LAT = sys.argv[3] if len(sys.argv) > 3 else "20"
def fp():
    s=socket.socket(); s.bind(("127.0.0.1",0)); p=s.getsockname()[1]; s.close(); return p
sp, pp = fp(), fp()
env=dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
srv=subprocess.Popen([ROOT+"/tests/node_modules/.bin/s3rver","-d",ROOT+"/build/demo/s3rver-data","-a","127.0.0.1","-p",str(sp),"--silent"],env=env,stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
px=subprocess.Popen(["/usr/bin/python3",ROOT+"/bench/proxy.py","--listen",str(pp),"--upstream",str(sp),"--latency-ms",LAT],stdout=subprocess.DEVNULL,stderr=subprocess.DEVNULL)
time.sleep(3)
mnt=os.path.join(ROOT,"build","bench","ahead-ab-mnt"); os.makedirs(mnt,exist_ok=True)
fenv=dict(os.environ,AWS_ACCESS_KEY_ID="S3RVER",AWS_SECRET_ACCESS_KEY="S3RVER",AWS_EC2_METADATA_DISABLED="true",ALIBABA_CLOUD_ECS_METADATA_DISABLED="true")
def run(b):
    subprocess.run([b,"s3://demo",mnt,"--endpoint-url","http://127.0.0.1:%d"%pp,"--force-path-style","--region","us-east-1","--log-file",os.path.join(ROOT,"build","bench","ahead-ab.log")],env=fenv,check=True)
    subprocess.run(["sync"]); open("/proc/sys/vm/drop_caches","w").write("3\n")
    t0=time.monotonic(); paths=[]
    for d,ds,fs in os.walk(mnt):
        ds.sort()
        if "shards" in d: continue
        for f in sorted(fs): paths.append(os.path.join(d,f))
    it=iter(paths); lk=threading.Lock(); n=[0]
    def w():
        while True:
            with lk: p=next(it,None)
            if p is None: return
            with open(p,"rb",buffering=0) as f: f.readall()
            with lk: n[0]+=1
    ts=[threading.Thread(target=w) for _ in range(8)]
    [t.start() for t in ts]; [t.join() for t in ts]
    dt=time.monotonic()-t0
    subprocess.run(["fusermount3","-u",mnt]); time.sleep(0.5)
    return n[0]/dt
try:
    for r in range(2):
        for name,b in (("old",OLD),("new",NEW)) if r==0 else (("new",NEW),("old",OLD)):
            print("round %d %s %.0f files/s (walk order, 8 threads, %s ms first byte)"%(r+1,name,run(b),LAT),flush=True)
finally:
    subprocess.run(["fusermount3","-uz",mnt],capture_output=True); px.terminate(); srv.terminate()
