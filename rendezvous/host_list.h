// SLURM's host-list grammar ("h[01-03,07],g5" -> h01 h02 h03 h07 g5), for the rendezvous host
// of a job started by srun: the first host of SLURM_STEP_NODELIST.
#pragma once

#include <string>
#include <vector>

namespace cerar {

// Expands a host list: items separated by commas; each item is text with bracketed groups of
// numbers and ranges ("[1-3,7]"), a range keeping the zero padding of its lower bound; several
// groups in one item multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2). Throws
// InvalidArgumentError naming the list when it is malformed or expands past `limit` hosts.
std::vector<std::string> expandHostList(const std::string& list, size_t limit = 1 << 20);

// SLURM's tasks-per-node grammar ("2(x3),1" -> 2 2 2 1); throws InvalidArgumentError.
std::vector<int> expandTasksPerNode(const std::string& counts, size_t limit = 1 << 20);

}  // namespace cerar
