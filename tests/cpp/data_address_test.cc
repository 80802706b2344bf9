// The data links' address (rendezvous/data_address.h), SLURM's host lists
// (rendezvous/host_list.h) and the launchers' variables that name them.
#include <map>

#include <gtest/gtest.h>

#include "core/config/config.h"
#include "variables.h"
#include "rendezvous/data_address.h"
#include "rendezvous/host_list.h"
#include "common/error.h"

namespace cerar {
namespace {

using Strings = std::vector<std::string>;

const std::vector<InterfaceAddress> kOneNic = {
    {"lo", "127.0.0.1", true}, {"eth0", "10.1.0.5", false}, {"eth0", "fe80::1", false}};
const std::vector<InterfaceAddress> kTwoNics = {
    {"lo", "127.0.0.1", true}, {"eth0", "10.1.0.5", false}, {"ib0", "192.168.7.5", false}};

DataAddressInputs inputs(std::string rendezvous, bool peersRemote,
                         std::optional<std::string> routed,
                         std::vector<InterfaceAddress> interfaces = kOneNic) {
  DataAddressInputs in;
  in.rank = 3;
  in.rendezvousAddr = std::move(rendezvous);
  in.peersRemote = peersRemote;
  in.interfaces = std::move(interfaces);
  in.route = [routed](const std::string& host, std::string* why) {
    if (!routed) *why = "cannot resolve '" + host + "'";
    return routed;
  };
  return in;
}

TEST(RouteLookup, EachLocalAddressRoutesToItself) {
  std::string why;
  EXPECT_EQ(routeSourceAddress("127.0.0.1", &why), "127.0.0.1");
  EXPECT_EQ(routeSourceAddress("127.0.0.9", &why), "127.0.0.1");  // lo's own address answers
  int checked = 0;
  for (const auto& i : localInterfaces()) {
    if (i.loopback || i.address.find(':') != std::string::npos) continue;
    EXPECT_EQ(routeSourceAddress(i.address, &why), i.address) << i.name;
    ++checked;
  }
  RecordProperty("non_loopback_checked", checked);
}

TEST(RouteLookup, AnUnresolvableNameSaysSo) {
  std::string why;
  EXPECT_FALSE(routeSourceAddress("no-such-host.invalid", &why));
  EXPECT_NE(why.find("cannot resolve 'no-such-host.invalid'"), std::string::npos) << why;
}

TEST(DataAddress, TheRouteToTheRendezvousHostPicksTheAddress) {
  const DataAddress d = chooseDataAddress(inputs("10.1.0.1", true, "10.1.0.5"));
  EXPECT_EQ(d.address, "10.1.0.5");
  EXPECT_EQ(d.iface, "eth0");
  EXPECT_FALSE(d.named);
  EXPECT_NE(d.reason.find("route to the rendezvous host 10.1.0.1"), std::string::npos);
}

TEST(DataAddress, LoopbackRendezvousStaysOnLoopback) {
  const DataAddress d = chooseDataAddress(inputs("127.0.0.1", true, std::nullopt));
  EXPECT_EQ(d.address, "127.0.0.1");
  EXPECT_EQ(d.iface, "lo");
}

TEST(DataAddress, AHostNameOn127011WithRemotePeersTakesTheOnlyInterface) {
  // Rank 0's own host name resolves to 127.0.1.1 there (Debian's /etc/hosts).
  const DataAddress d = chooseDataAddress(inputs("node1", true, "127.0.0.1"));
  EXPECT_EQ(d.address, "10.1.0.5");
  EXPECT_EQ(d.iface, "eth0");
  // All ranks on this host: loopback is right.
  EXPECT_EQ(chooseDataAddress(inputs("node1", false, "127.0.0.1")).address, "127.0.0.1");
}

TEST(DataAddress, LoopbackWithRemotePeersAndSeveralInterfacesIsRefused) {
  try {
    chooseDataAddress(inputs("node1", true, "127.0.0.1", kTwoNics));
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
    EXPECT_NE(what.find("'node1' is loopback on this host (the route to it starts at "
                        "127.0.0.1"), std::string::npos) << what;
    EXPECT_NE(what.find("CERAR_IFACE"), std::string::npos) << what;
    EXPECT_NE(what.find("eth0 (10.1.0.5), ib0 (192.168.7.5)"), std::string::npos) << what;
  }
  // No interface but loopback: refused too.
  EXPECT_THROW(chooseDataAddress(inputs("node1", true, "127.0.0.1", {{"lo", "127.0.0.1", true}})),
               InvalidArgumentError);
}

TEST(DataAddress, ANamedInterfaceWinsAndIsChecked) {
  DataAddressInputs in = inputs("10.1.0.1", true, "10.1.0.5", kTwoNics);
  in.iface = "ib0";
  in.ifaceBy = "GLOO_SOCKET_IFNAME";
  DataAddress d = chooseDataAddress(in);
  EXPECT_TRUE(d.named);
  EXPECT_EQ(d.iface, "ib0");
  EXPECT_EQ(d.address, "192.168.7.5");
  EXPECT_NE(d.reason.find("named by GLOO_SOCKET_IFNAME"), std::string::npos);
  in.iface = "eth9";
  EXPECT_THROW(chooseDataAddress(in), InvalidArgumentError);
  in.iface = "lo";  // loopback named while peers are remote
  EXPECT_THROW(chooseDataAddress(in), InvalidArgumentError);
  in.peersRemote = false;
  EXPECT_EQ(chooseDataAddress(in).iface, "lo");
}

TEST(DataAddress, AnUnroutableRendezvousHostIsAnError) {
  try {
    chooseDataAddress(inputs("node9", true, std::nullopt));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resolve 'node9'"), std::string::npos);
  }
}

TEST(DataAddress, NcclFollowsTheChoiceUnlessItsVariableIsSet) {
  const DataAddress d{"eth0", "10.1.0.5", false, ""};
  auto none = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  using Vars = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(ncclEnvironmentFor(d, none), (Vars{{"NCCL_SOCKET_IFNAME", "=eth0"}}));
  auto set = [](const std::string& name) -> std::optional<std::string> {
    if (name == "NCCL_SOCKET_IFNAME") return "ib";
    return std::nullopt;
  };
  EXPECT_TRUE(ncclEnvironmentFor(d, set).empty());
  EXPECT_TRUE(ncclEnvironmentFor(DataAddress{}, none).empty());
}

TEST(InterfaceVariables, CerarIfaceThenTorchsThenHorovods) {
  const std::map<std::string, std::string> base = {{"RANK", "0"}, {"WORLD_SIZE", "1"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(base.begin(), base.end());
    return testing::configFrom(extra);
  };
  EXPECT_EQ(with({}).iface, "");
  RuntimeConfig c = with({{"HOROVOD_GLOO_IFACE", "eth2"}});
  EXPECT_EQ(c.iface, "eth2");
  EXPECT_EQ(c.ifaceVariable, "HOROVOD_GLOO_IFACE");
  c = with({{"HOROVOD_GLOO_IFACE", "eth2"}, {"GLOO_SOCKET_IFNAME", "eth1,eth3"}});
  EXPECT_EQ(c.iface, "eth1");  // the first of torch's list
  EXPECT_EQ(c.ifaceVariable, "GLOO_SOCKET_IFNAME");
  c = with({{"GLOO_SOCKET_IFNAME", "eth1"}, {"CERAR_IFACE", "ib0"}});
  EXPECT_EQ(c.iface, "ib0");
  EXPECT_EQ(c.ifaceVariable, "CERAR_IFACE");
}

TEST(TorchrunVariables, APyTorchJobPodWithoutLocalVariablesIsAloneOnItsHost) {
  RuntimeConfig c = testing::configFrom({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "train-master-0"},
                             {"MASTER_PORT", "23456"}, {"CERAR_SECRET", "x"}});
  EXPECT_EQ(c.localSize, 1);
  EXPECT_EQ(c.localRank, 0);
  EXPECT_EQ(c.rendezvousAddr, "train-master-0");
  EXPECT_EQ(c.rendezvousPort, 23457);
  // On loopback (or without MASTER_ADDR) every rank is on this host, as before.
  c = testing::configFrom({{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "127.0.0.1"}});
  EXPECT_EQ(c.localSize, 4);
  EXPECT_EQ(c.localRank, 2);
}

TEST(HostList, SlurmsGrammar) {
  EXPECT_EQ(expandHostList("h[01-03,07],g5"), (Strings{"h01", "h02", "h03", "h07", "g5"}));
  EXPECT_EQ(expandHostList("node7"), (Strings{"node7"}));
  EXPECT_EQ(expandHostList("a,b"), (Strings{"a", "b"}));
  EXPECT_EQ(expandHostList("n[8-11]"), (Strings{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expandHostList("n[098-101]"), (Strings{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(expandHostList("r[1-2]n[1-2]-ib"),
            (Strings{"r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"}));
  for (const char* bad : {"h[1-", "h1]", "h[a-b]", "h[3-1]", "h[[1]]", "a,,b", "h[]", ""}) {
    EXPECT_THROW(expandHostList(bad), InvalidArgumentError) << bad;
  }
  EXPECT_THROW(expandHostList("h[1-100000000]", 1000), InvalidArgumentError);
}

TEST(HostList, TasksPerNode) {
  EXPECT_EQ(expandTasksPerNode("2(x3),1"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expandTasksPerNode("4"), (std::vector<int>{4}));
  for (const char* bad : {"2(x)", "2(3)", "x", "2(x3", ""}) {
    EXPECT_THROW(expandTasksPerNode(bad), InvalidArgumentError) << bad;
  }
}

TEST(SlurmVariables, TheFirstHostOfTheStepIsTheRendezvousHost) {
  const RuntimeConfig c = testing::configFrom({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"},
                                   {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
                                   {"SLURM_STEP_NODELIST", "h[01-03,07],g5"},
                                   {"SLURM_STEP_NUM_NODES", "4"},
                                   {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"},
                                   {"SLURM_JOB_ID", "20123"}, {"CERAR_SECRET", "x"}});
  EXPECT_EQ(c.rank, 5);
  EXPECT_EQ(c.size, 7);
  EXPECT_EQ(c.localRank, 1);
  EXPECT_EQ(c.localSize, 2);
  EXPECT_EQ(c.rendezvousAddr, "h01");
  EXPECT_EQ(c.rendezvousPort, 20123);
  EXPECT_TRUE(c.hostStore);
  // CERAR_RENDEZVOUS_ADDR overrides; a single node stays on loopback.
  EXPECT_EQ(testing::configFrom({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NNODES", "2"},
                     {"SLURM_STEP_NODELIST", "h[1-2]"}, {"CERAR_RENDEZVOUS_ADDR", "10.0.0.1"}})
                .rendezvousAddr,
            "10.0.0.1");
  EXPECT_EQ(testing::configFrom({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                     {"SLURM_STEP_NODELIST", "h1"}}).rendezvousAddr,
            "127.0.0.1");
}

TEST(SlurmVariables, MissingOrBadNodeListsSaySo) {
  try {
    testing::configFrom({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NNODES", "2"}});
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_STEP_NODELIST"), std::string::npos);
  }
  try {
    testing::configFrom({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_NODELIST", "h[1-"}});
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_STEP_NODELIST: bad host list 'h[1-'"),
              std::string::npos) << e.what();
  }
}

TEST(OpenMpiVariables, AcrossHostsTheRendezvousAddressMustBeGiven) {
  const std::map<std::string, std::string> env = {
      {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  try {
    testing::configFrom(env);
    FAIL() << "no error";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("CERAR_RENDEZVOUS_ADDR is not set"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("mpirun -x CERAR_RENDEZVOUS_ADDR="), std::string::npos);
  }
  auto given = env;
  given["CERAR_RENDEZVOUS_ADDR"] = "node1";
  EXPECT_EQ(testing::configFrom(given).rendezvousAddr, "node1");
}

}  // namespace
}  // namespace cerar
