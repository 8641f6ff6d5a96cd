"""A mixed everyday Python workload: dicts, json, lists of strings, small
objects churned. Prints its wall time in seconds."""
import json
import time

t0 = time.perf_counter()
acc = 0
for rnd in range(30):
    rows = [{"id": i, "name": f"user-{i}", "tags": [str(j) for j in range(i % 7)], "score": i * 0.5}
            for i in range(20000)]
    text = json.dumps(rows)
    back = json.loads(text)
    index = {r["name"]: r for r in back}
    words = " ".join(r["name"] for r in back).split()
    acc += len(index) + len(words) + len(text)
    del rows, back, index, words, text
print(f"{time.perf_counter() - t0:.4f}")
