"""Write example.jsonl: a synthetic two-minute-shaped trace, compressed to 30 seconds.

Arrivals: a Poisson stream of 1 request/s with a burst of 12 requests in the middle (what
a retrying client or a batch kicked off by a cron job looks like). Lengths: chat-like,
lognormal prompts (median 160 tokens) and answers (median 48). Seeded, so it is the same
file every time: `python load_traces/make_example.py`.
"""

import json
import math
import random
from pathlib import Path

rng = random.Random(0)
arrivals, t = [], 0.0
while t < 30:
    arrivals.append(t)
    t += rng.expovariate(1.0)
arrivals += [15.0 + 0.05 * i for i in range(12)]  # the burst
lines = []
for at in sorted(arrivals):
    prompt = min(600, max(24, round(rng.lognormvariate(math.log(160), 0.6))))
    output = min(128, max(8, round(rng.lognormvariate(math.log(48), 0.5))))
    lines.append(json.dumps({"arrival_s": round(at, 3), "prompt_tokens": prompt,
                             "output_tokens": output}))
Path(__file__).with_name("example.jsonl").write_text("\n".join(lines) + "\n")
print(f"{len(lines)} requests over {max(arrivals):.1f} s")
