# Issue 15: PyTorch's cuBLASLt F.linear (the harness's heuristic baseline) timed as CUDA-graph
# replays and as back-to-back calls between events, against limits measured in the same run.
# Run on the H200 as: TORCH_BLAS_PREFER_CUBLASLT=1 python3 bench/cublaslt/issue15_torch.py
# (docs/benchmarks/history.md, Issue 15). Kept byte for byte as it ran; compact to fit one device command.
import sys,torch,math,statistics as st,torch.nn.functional as F
C=torch.cuda;print(torch.__version__,torch.version.cuda,C.get_device_name())
L2=C.get_device_properties(0).L2_cache_size;s=C.Stream()
def tm(fn,ops,mode,tr=15):
 with C.stream(s):
  for i in range(3):fn(i)
  C.synchronize()
  if mode=='graph':
   g=C.CUDAGraph()
   with C.graph(g,stream=s):
    for i in range(ops):fn(i)
   g.replay();C.synchronize()
  r=[]
  for t in range(tr+1):
   C._sleep(int(2e5+ops*(1e4 if mode=='graph' else 6e4)));a,b=C.Event(enable_timing=True),C.Event(enable_timing=True);a.record()
   if mode=='graph':g.replay()
   else:
    for i in range(ops):fn(i)
   b.record();b.synchronize();r.append(a.elapsed_time(b)/ops)
 r=r[1:];m=st.median(r);return m,(max(r)-min(r))/m
src=torch.ones(1<<30,dtype=torch.uint8,device='cuda');dst=torch.empty_like(src)
for mode in sys.argv[1:]or("graph","events"):
 cm,cs=tm(lambda i:dst.copy_(src),4,mode);bw=2*(1<<30)/(cm*1e-3)
 fl,fs=tm(lambda i:C._sleep(0),200,mode)
 print(f'{mode}: copy {bw/1e9:.0f} GB/s spread {cs*100:.1f}%; empty kernel {fl*1e3:.2f} us spread {fs*100:.1f}%')
 for n,m,k in[(10240,1,320),(336,1,10240),(2560,1,1536),(4096,1,2560),(10240,16,2560),(10240,256,2560),(336,1024,10240),(512,512,2560)]:
  by=2*(n*k+m*k+m*n);sets=max(1,min(64,math.ceil(3*L2/(by+2*m*n))))
  X=[torch.randn(m,k,device='cuda',dtype=torch.bfloat16) for _ in range(sets)];W=[torch.randn(n,k,device='cuda',dtype=torch.bfloat16) for _ in range(sets)]
  ops=max(sets,min(400,max(2,math.ceil(1e-3/(by/3e12+5e-6)))))
  t,sp=tm(lambda i:F.linear(X[i%sets],W[i%sets]),ops,mode);lim=max(by/bw*1e3,fl)
  print(f'{mode} {n}x{k} M={m}: {t*1e3:.2f} us spread {sp*100:.1f}% ops {ops} sets {sets} bytes {by} limit {lim*1e3:.2f} us = {lim/t*100:.0f}% of limit')
  del X,W
