import time, statistics, torch
from specharness.session import Session, EngineRequest
from specharness.methods.medusa import drafter as md
s = Session(EngineRequest("smollm2", "bfloat16", "max-autotune", "cpu", 2))
t = s.target
for opts in ({"tree": "chain"}, {}):
    d = md.build(t, {**{o.name: o.default for o in md.OPTIONS}, **opts})
    h = torch.randn(t.hidden_size, dtype=t.dtype)
    with torch.inference_mode():
        t0 = time.perf_counter(); t.backend.run_module(d.step, h); print("first call", time.perf_counter() - t0)
        for name, f in (("compiled", lambda: t.backend.run_module(d.step, h)), ("eager", lambda: d.step(h)),
                        ("eager old", lambda: d.heads.logits(h, t, 4, d.head_w))):
            ts = []
            for _ in range(200):
                t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
            print(opts, name, f"{1e3 * statistics.median(ts):.3f} ms")
