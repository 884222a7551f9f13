# Issue 15: the CUDA calls tunedblas-lt's graph mode and limits make (stream capture, graph
# instantiation, D2D cudaMemcpyAsync, the PTX empty kernel through the driver), made through
# ctypes on the H200: python3 bench/cublaslt/issue15_abi.py. Kept byte for byte as it ran.
import ctypes as c,glob,site,statistics as st
L=sorted(x for p in site.getsitepackages() for x in glob.glob(p+'/nvidia/**/libcudart.so.1[23]',recursive=True));print(L)
rt=c.CDLL(L[-1]);dr=c.CDLL('libcuda.so.1');P=c.c_void_p
def ck(e,w):
 if e:raise SystemExit(f'{w}: error {e}')
for n in['cudaStreamBeginCapture','cudaStreamEndCapture','cudaGraphInstantiateWithFlags','cudaGraphLaunch','cudaGraphExecDestroy','cudaGraphDestroy','cudaGraphCreate','cudaMemcpyAsync','cudaMemsetAsync','cudaGetLastError']:getattr(rt,n)
s=P();ck(rt.cudaStreamCreate(c.byref(s)),'stream')
B=1<<30;a=P();b=P();ck(rt.cudaMalloc(c.byref(a),c.c_size_t(B)),'m');ck(rt.cudaMalloc(c.byref(b),c.c_size_t(B)),'m')
ptx=b".version 7.0\n.target sm_50\n.address_size 64\n.visible .entry tunedblas_empty()\n{\n\tret;\n}\n\0"
m=P();ck(dr.cuModuleLoadData(c.byref(m),ptx),'cuModuleLoadData');f=P();ck(dr.cuModuleGetFunction(c.byref(f),m,b'tunedblas_empty'),'getfn')
def k():ck(dr.cuLaunchKernel(f,1,1,1,1,1,1,0,s,None,None),'launch')
def cp():ck(rt.cudaMemcpyAsync(b,a,c.c_size_t(B),3,s),'cp')
def graph(fn,ops):
 ck(rt.cudaStreamBeginCapture(s,1),'begin')
 for _ in range(ops):fn()
 g=P();ck(rt.cudaStreamEndCapture(s,c.byref(g)),'end');e=P();ck(rt.cudaGraphInstantiateWithFlags(c.byref(e),g,c.c_ulonglong(0)),'inst');return e
e0=P();e1=P();rt.cudaEventCreate(c.byref(e0));rt.cudaEventCreate(c.byref(e1))
def tm(fn,ops,mode):
 ex=graph(fn,ops) if mode=='graph' else None
 r=[]
 for t in range(16):
  rt.cudaEventRecord(e0,s)
  if ex:ck(rt.cudaGraphLaunch(ex,s),'gl')
  else:
   for _ in range(ops):fn()
  rt.cudaEventRecord(e1,s);rt.cudaEventSynchronize(e1);ms=c.c_float();rt.cudaEventElapsedTime(c.byref(ms),e0,e1);r.append(ms.value/ops)
 r=r[1:];m=st.median(r);return m,(max(r)-min(r))/m
for mode in('graph','events'):
 cm,cs=tm(cp,4,mode);fl,fs=tm(k,200,mode)
 print(mode,f'copy {2*B/cm/1e6:.0f} GB/s ({cs*100:.1f}%), empty kernel {fl*1e3:.2f} us ({fs*100:.1f}%)')
