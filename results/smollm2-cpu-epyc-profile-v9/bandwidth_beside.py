"""Does a bandwidth probe taken beside each drafter's timings steady its per-token / roofline?"""
import statistics, time, torch
from specharness.plugins import build_registry
from specharness.runner import Settings, build_method
from specharness.session import EngineRequest, Session
from specharness.profile import PROFILE_PROMPT, draft_line, bandwidth_gbs, settled
from specharness.budget import sizes_for
torch.set_num_threads(2)
reg = build_registry()
target = settled(Session(EngineRequest("smollm2", "auto", "auto", "cpu", 2), registry=reg).target)
prompt = target.chat_ids([{"role": "user", "content": PROFILE_PROMPT}])
ms = {"early_exit": build_method(reg, "early_exit", [], target, 0.0),
      "kangaroo": build_method(reg, "kangaroo", ["eta=0", "gamma=6"], target, 0.0),
      "eagle:chain": build_method(reg, "eagle", ["mode=chain"], target, 0.0)}
for m in ms.values(): target.expect_widths(m.max_width)
for m in ms.values(): m.generate(prompt, Settings(max_new_tokens=8), 0)
part = Settings(max_new_tokens=24)
for rep in range(4):
    for name, m in ms.items():
        bws, rounds = [], []
        for i in range(2):
            bws.append(bandwidth_gbs(repeats=3))
            sizes = sizes_for(m.max_width - 1, target.backend.width)
            for n in sizes if i % 2 == 0 else sizes[::-1]:
                rounds += m.at_size(prompt, part, 0, n).rounds[1:]
        bws.append(bandwidth_gbs(repeats=3))
        f, p, med = draft_line(rounds)
        bw = statistics.median(bws)
        roof = m.draft_bytes / bw / 1e6
        print(f"rep {rep} {name}: bw {bw:.1f} ({min(bws):.1f}-{max(bws):.1f}) per {1e3*p:.3f} ms  /roof(local bw) {1e3*p/roof:.2f}  /roof(28.3) {1e3*p/(m.draft_bytes/28.3/1e6):.2f}", flush=True)
