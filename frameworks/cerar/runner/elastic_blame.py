"""Which hosts one failure of an elastic generation takes out (pure: no processes, no store).

A failure is seen as exits (certain deaths: the worker's host is out at once) and as reports,
each blaming a peer. Blames are only as good as what a survivor saw: during a start or a reset
(links being made, the probe running) a death makes every survivor fail at its own neighbour,
so they blame healthy peers; and a peer that reported a failure itself is alive and reaches the
store. So blames are judged together, once the failure has settled:

1. a blame of a worker that died in this failure adds nothing;
2. a blame of a worker that reported a failure itself is not taken (it is alive and talks);
3. when a worker died in this failure, blames of live workers are not taken (the death explains
   the failure);
4. otherwise (nobody died: a frozen process, a host cut off) the blamed worker's host goes out.
"""


def judge(blames, died, reporters):
    """`blames`: [(reporter, blamed)] worker ids in the order read; `died`: ids that died in
    this failure; `reporters`: ids that reported it. Returns (out, ignored): the blamed ids
    whose hosts go out, in order, and [(reporter, blamed, why)] for the blames not taken."""
    out, ignored = [], []
    dead = sorted(died)
    for reporter, blamed in blames:
        if blamed in died or blamed in out:
            continue
        if blamed in reporters:
            ignored.append((reporter, blamed, "it reported the failure itself"))
        elif dead:
            ignored.append((reporter, blamed, f"worker {dead[0]} died in the same failure"))
        else:
            out.append(blamed)
    return out, ignored
