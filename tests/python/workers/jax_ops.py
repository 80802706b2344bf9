"""cerar.jax on every rank: arrays, a gradient pytree averaged in fused calls, broadcasts."""
import jax.numpy as jnp
import numpy as np

import cerar.jax as cj
from common import check, check_close

halves = [cj.ProcessSet([0, 1]), cj.ProcessSet([2, 3])]
cj.init(algorithm="ring", process_sets=halves)
r, n = cj.rank(), cj.size()
ranks_sum = n * (n - 1) / 2

x = jnp.arange(6.0, dtype=jnp.float32) + r
out = cj.allreduce(x, op=cj.Sum, name="x")
check("type", isinstance(out, type(x)) or hasattr(out, "block_until_ready"), str(type(out)))
check_close("sum", np.asarray(out), np.arange(6.0) * n + ranks_sum)
check_close("average", np.asarray(cj.allreduce(x, name="avg")), np.arange(6.0) + ranks_sum / n)
check_close("max", np.asarray(cj.allreduce(jnp.array([r, -r], jnp.int32), op=cj.Max)),
            [n - 1, 0])

grads = {"dense": {"w": jnp.full((3, 2), float(r)), "b": jnp.full((2,), 1.0)},
         "embed": [jnp.full((4,), float(r), jnp.float32), jnp.arange(3, dtype=jnp.int32) * r],
         "scale": jnp.float32(r)}
avg = cj.allreduce_tree(grads, op=cj.Sum, name="grads")
check_close("tree w", np.asarray(avg["dense"]["w"]), np.full((3, 2), ranks_sum))
check_close("tree b", np.asarray(avg["dense"]["b"]), np.full((2,), float(n)))
check_close("tree list", np.asarray(avg["embed"][0]), np.full((4,), ranks_sum))
check_close("tree int", np.asarray(avg["embed"][1]), np.arange(3) * ranks_sum)
check_close("tree scalar", np.asarray(avg["scale"]), ranks_sum)
mean = cj.allreduce_tree({"g": jnp.full((5,), float(r))})
check_close("tree average", np.asarray(mean["g"]), np.full((5,), ranks_sum / n))

params = {"w": jnp.full((2, 2), float(r)), "b": jnp.zeros(3) + r}
same = cj.broadcast_tree(params, root_rank=n - 1)
check_close("broadcast_tree", np.asarray(same["w"]), np.full((2, 2), n - 1.0))
check_close("broadcast", np.asarray(cj.broadcast(jnp.ones(2) * r, root_rank=0)), np.zeros(2))
check_close("allgather", np.asarray(cj.allgather(jnp.full((r + 1,), float(r)))),
            np.concatenate([np.full((k + 1,), float(k)) for k in range(n)]))
half = halves[r // 2]
tree = cj.allreduce_tree({"g": jnp.full((3,), float(r))}, op=cj.Sum, process_set=half)
check_close("tree in a process set", np.asarray(tree["g"]), np.full((3,), float(sum(half.ranks))))
check_close("broadcast in a process set",
            np.asarray(cj.broadcast(jnp.ones(2) * r, root_rank=half.ranks[1], process_set=half)),
            np.full(2, float(half.ranks[1])))
cj.barrier(process_set=half)
cj.barrier()
cj.shutdown()
print("jax OK", flush=True)
