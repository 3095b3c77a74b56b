// The ranks of a --ddp run kept together (see ranks.h).
#include "train/ranks.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/ddp.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"
#include "dist/nccl_communicator.h"

namespace frugal::train {

Communicators open_communicators(const TrainOptions& o) {
  dist::mpi_init();
  Communicators c;
  c.host = dist::make_mpi_communicator();
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.ddp_timeout * 1000.0));
  c.host->set_timeout(timeout);
  FRUGAL_CHECK_VALUE(c.host->world_size() == o.ranks, "--ddp: mpirun started ", c.host->world_size(),
                     " ranks but the run was set up for ", o.ranks);
  if (o.device.is_cuda()) {
    c.device = dist::make_nccl_communicator(*c.host, o.device.index());
    c.device->set_timeout(timeout);
  }
  return c;
}

std::string rank_agreement_json(const TrainOptions& o) {
  auto j = nlohmann::ordered_json::parse(run_identity_json(o));
  j["ddp-ranks"] = o.ranks;
  j["steps"] = o.steps ? nlohmann::ordered_json(*o.steps) : nlohmann::ordered_json("all");
  j["save-every"] = o.save_every;
  j["save"] = !o.save.empty();
  j["bucket-cap"] = o.bucket_cap_bytes;
  j["bucket-views"] = o.bucket_views;
  j["zero"] = o.zero;
  j["device"] = o.device.is_cuda() ? "cuda" : o.device.str();
  j["allow-nonfinite"] = o.allow_nonfinite;  // one rank stopping on a NaN loss alone would leave the others waiting
  return j.dump();
}

void check_ranks_agree(dist::Communicator& host, const std::string& mine) {
  const auto text_of = [&](int root) {  // rank `root`'s text, on every rank
    const Tensor length = from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(mine.size())});
    host.broadcast(length, root);
    const Tensor bytes = empty({length.item<std::int64_t>()}, {.dtype = DType::u8});
    if (host.rank() == root) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
    host.broadcast(bytes, root);
    return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel()));
  };
  const std::string root_text = text_of(0);
  const Tensor differs = empty({host.world_size()}, {.dtype = DType::i32});
  host.all_gather(full({1}, mine == root_text ? 0 : 1, {.dtype = DType::i32}), differs);
  const std::vector<std::int32_t> flags = differs.to_vector<std::int32_t>();
  const auto first = std::find(flags.begin(), flags.end(), 1);
  if (first == flags.end()) return;
  const int rank = static_cast<int>(first - flags.begin());
  const auto others = std::count(flags.begin(), flags.end(), 1) - 1;
  FRUGAL_THROW(RanksDisagreeError, "the ranks were started with different flags: rank ", rank, " has ",
               identity_difference(text_of(rank), root_text, "rank 0"),
               others > 0 ? " (and " + std::to_string(others) + " more ranks differ)" : std::string(),
               "; every rank must get the same flags");
}

StepTotals all_ranks(const Communicators& comms, const StepTotals& mine) {
  if (!comms.host) return mine;
  const Tensor sums = from_vector(std::vector<double>{mine.loss_sum, mine.correct, mine.samples});
  comms.host->all_reduce(sums, dist::ReduceOp::sum);
  const std::vector<double> all = sums.to_vector<double>();
  return {all[0], all[1], all[2]};
}

bool any_rank(const Communicators& comms, bool mine) {
  if (!comms.host) return mine;
  const Tensor flag = full({1}, mine ? 1 : 0, {.dtype = DType::i32});
  comms.host->all_reduce(flag, dist::ReduceOp::max);
  return flag.item<std::int32_t>() != 0;
}

std::vector<RankReport> rank_reports(const Communicators& comms, const dist::DistributedDataParallel* ddp,
                                     const TrainResult& result) {
  if (!comms.host) return {};
  std::vector<double> mine{static_cast<double>(result.peak_allocated_bytes), static_cast<double>(result.peak_reserved_bytes),
                           ddp->wait_seconds(), ddp->communication_seconds()};
  for (std::size_t bytes : result.peak_bytes_by_tag) mine.push_back(static_cast<double>(bytes));
  const auto width = static_cast<std::int64_t>(mine.size());
  const Tensor all = empty({comms.world_size() * width}, {.dtype = DType::f64});
  comms.host->all_gather(from_vector(mine), all);
  const std::vector<double> values = all.to_vector<double>();
  std::vector<RankReport> reports(static_cast<std::size_t>(comms.world_size()));
  for (std::size_t r = 0; r < reports.size(); ++r) {
    const double* v = values.data() + r * static_cast<std::size_t>(width);
    RankReport& report = reports[r];
    report.rank = static_cast<int>(r);
    report.peak_allocated_bytes = static_cast<std::size_t>(v[0]);
    report.peak_reserved_bytes = static_cast<std::size_t>(v[1]);
    report.communication_wait_seconds = v[2];
    report.communication_seconds = v[3];
    for (std::size_t t = 0; t < report.peak_bytes_by_tag.size(); ++t) report.peak_bytes_by_tag[t] = static_cast<std::size_t>(v[4 + t]);
  }
  return reports;
}

}  // namespace frugal::train
