// tandem-resnet: trains a ResNet on Fashion-MNIST (default), CIFAR-10 or synthetic data, with SGD
// (Nesterov momentum, weight decay off for biases and batch norm), a one-cycle schedule and
// random crop + flip augmentation. Shows a progress bar, evaluates after every epoch, writes a
// checkpoint after every epoch and can resume from it bit-exactly.
// Usage: tandem-resnet [--model resnet20] [--dataset fashion-mnist] [--epochs N] ... (--help)
#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>

#include "tandem/kernels/cpu_isa.hpp"
#include "tandem/monitor/gpu_health.hpp"
#include "tandem/monitor/json.hpp"
#include "tandem/monitor/predictor.hpp"
#include "tandem/monitor/progress.hpp"
#include "tandem/monitor/step_report.hpp"
#include "tandem/monitor/timeline.hpp"
#include "tandem/tandem.hpp"

using namespace tandem;

namespace {

struct Config {
  std::string model = "resnet20", dataset = "fashion-mnist", data_dir, checkpoint_dir = "checkpoints";
  std::string resume, metrics, trace, precision = "f32", device = "auto";
  int epochs = 5, threads = 0, workers = 1, ranks = 0, grad_accum = 1;
  int64_t report_every = 0;
  std::string bucket_mb = "25";  // MiB, or "auto"
  std::string grad_compression = "none";  // or f16, bf16
  bool sync_bn = false;
  bool tta = false;
  bool channels_last = false;  // batches and conv weights NHWC (cuDNN's fast layout for f16/bf16)
  int64_t batch = 128, max_steps = 0, synthetic_size = 10000;
  double lr = 0.2, momentum = 0.9, weight_decay = 5e-4, label_smoothing = 0.0;
  uint64_t seed = 0;
};

struct Data {
  std::shared_ptr<data::ImageDataset> train, test;
  data::Transforms train_transforms, test_transforms, mirrored_test_transforms;
  // The same augmentation as one kernel on a GPU (u8 datasets only: the bytes go there).
  std::optional<data::DeviceAugment> train_on_device, test_on_device, mirrored_test_on_device;
};

Data load_data(const Config& c) {
  Data d;
  std::vector<float> mean, std;
  int64_t crop_padding = 4;
  if (c.dataset == "fashion-mnist") {
    auto load = [&](bool train) {
      // As bytes (a quarter of the memory); the dataset scales each sample to [0, 1].
      data::MnistSplit s = data::load_mnist(c.data_dir, train, DType::u8);
      return std::make_shared<data::TensorDataset>(s.images, s.labels, 10);
    };
    d.train = load(true);
    d.test = load(false);
    mean = {0.2860f}, std = {0.3530f};
    crop_padding = 2;
  } else if (c.dataset == "cifar10") {
    auto load = [&](bool train) {
      data::ImageSplit s = data::load_cifar10(c.data_dir, train);
      return std::make_shared<data::TensorDataset>(s.images, s.labels, 10);
    };
    d.train = load(true);
    d.test = load(false);
    mean = {0.4914f, 0.4822f, 0.4465f}, std = {0.2470f, 0.2435f, 0.2616f};
  } else {  // synthetic: random images and labels, for speed measurements
    d.train = std::make_shared<data::SyntheticDataset>(c.synthetic_size, Shape{3, 32, 32}, 10, c.seed);
    d.test = std::make_shared<data::SyntheticDataset>(std::min<int64_t>(1000, c.synthetic_size),
                                                      Shape{3, 32, 32}, 10, c.seed + 1);
    mean = {0.5f, 0.5f, 0.5f}, std = {0.29f, 0.29f, 0.29f};
  }
  auto normalize = std::make_shared<data::Normalize>(mean, std);
  d.train_transforms = {std::make_shared<data::RandomCrop>(crop_padding),
                        std::make_shared<data::RandomHorizontalFlip>(), normalize};
  d.test_transforms = {normalize};
  d.mirrored_test_transforms = {std::make_shared<data::RandomHorizontalFlip>(1.0), normalize};
  if (d.train->has_bytes()) {
    d.train_on_device = data::DeviceAugment().crop_padding(crop_padding).flip_p(0.5).mean(mean).std(std);
    d.test_on_device = data::DeviceAugment().mean(mean).std(std);
    d.mirrored_test_on_device = data::DeviceAugment().flip_p(1.0).mean(mean).std(std);
  }
  return d;
}

// Test accuracy over every rank's shard of the test set. Rank r reads samples r, r + W, ... of
// the (unshuffled) set, padded at the end to equal counts: only the first `real` are counted.
// With `mirrored` (--tta), each image's logits are summed with its mirror image's (the loader
// yields the same samples in the same order, flipped).
double evaluate(nn::Module& model, data::DataLoader& loader, comm::Communicator& comm,
                int64_t test_size, MemoryFormat format, data::DataLoader* mirrored = nullptr) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t world = comm.size(), rank = comm.rank();
  const Device device = comm.device();
  const int64_t real = rank < test_size ? (test_size - rank + world - 1) / world : 0;
  int64_t correct = 0, seen = 0;
  loader.start_epoch(0);
  if (mirrored) mirrored->start_epoch(0);
  while (auto b = loader.next()) {
    std::optional<data::Batch> m;
    if (mirrored) m = mirrored->next();
    const int64_t n = std::min<int64_t>(b->labels.numel(), real - seen);
    if (n > 0) {
      Tensor logits = model.forward(b->images.narrow(0, 0, n).to(device).contiguous(format));
      if (m)
        logits = logits + model.forward(m->images.narrow(0, 0, n).to(device).contiguous(format));
      Tensor pred = argmax(logits, 1);
      correct += sum(eq(pred, b->labels.narrow(0, 0, n).to(device))).item<int64_t>();
    }
    seen += b->labels.numel();
  }
  model.train();
  Tensor counts = from_vector(std::vector<double>{static_cast<double>(correct),
                                                  static_cast<double>(std::min(seen, real))})
                      .to(device);
  comm.allreduce(counts).wait();
  const auto v = counts.to_vector<double>();
  return v[1] > 0 ? v[0] / v[1] : 0.0;
}

// "--lr: must be positive, got -1", as CLI11 checks.
CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        try {
          const double x = std::stod(v);
          if (std::isfinite(x) && x > 0) return "";
        } catch (const std::exception&) {
        }
        return "must be positive and finite, got " + v;
      },
      "POSITIVE");
}

// A finite number >= 0, or a whole one (CLI11's NonNegativeNumber prints its range as 309
// digits).
CLI::Validator non_negative(bool whole) {
  return CLI::Validator(
      [whole](std::string& v) -> std::string {
        try {
          size_t used = 0;
          const double x = whole ? static_cast<double>(std::stoll(v, &used)) : std::stod(v, &used);
          if (used == v.size() && std::isfinite(x) && x >= 0) return "";
        } catch (const std::exception&) {
        }
        return std::string("must be a ") + (whole ? "whole" : "finite") + " number >= 0, got " + v;
      },
      whole ? "INT>=0" : "NUMBER>=0");
}

std::optional<DType> precision_dtype(const std::string& p) {
  if (p == "f16") return DType::f16;
  if (p == "bf16") return DType::bf16;
  return std::nullopt;
}

// What every rank shares: the configuration, the data (read only), the model replicas built on
// the main thread (rank 0's from --seed, as a one-rank run's), and a checkpoint to resume.
struct Shared {
  const Config& c;
  Data d;
  std::vector<std::shared_ptr<nn::Module>> replicas;
  std::optional<io::TrainingState> resume;
  std::map<std::string, std::string> identity;
  std::unique_ptr<monitor::Timeline> timeline;  // --trace
};

// One rank's training: its shard of every batch, DDP over the ranks, mixed precision, progress
// and checkpoints from rank 0.
void train_rank(Shared& sh, parallel::Rank& r) {
  const Config& c = sh.c;
  const Data& d = sh.d;
  const int world = r.world_size(), rank = r.rank();
  const bool lead = rank == 0;
  const int64_t per_rank = c.batch / world, micro = per_rank / c.grad_accum;
  // One replica per rank of this process (under a launcher: the one of this process).
  auto model = sh.replicas.at(sh.replicas.size() == 1 ? 0 : rank);
  model->to(r.device());
  const MemoryFormat format =
      c.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  model->to(format);  // before DDP and the optimizer: their buffers follow the parameters' layout
  if (c.sync_bn) parallel::convert_sync_batchnorm(*model, r.comm);
  parallel::DistributedDataParallel ddp(
      model, r.comm,
      monitor::bucket_cap_options(c.bucket_mb).compression(precision_dtype(c.grad_compression)));
  optim::SGD opt(optim::weight_decay_groups(*model, c.weight_decay),
                 optim::SGDOptions(c.lr).momentum(c.momentum).nesterov(true));
  CrossEntropyOptions loss_options;
  loss_options.label_smoothing = c.label_smoothing;
  const std::optional<DType> low = precision_dtype(c.precision);
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(low == DType::f16));
  scaler.set_sync(parallel::any_rank(r.comm));
  // On a GPU: batches go there as bytes through pinned staging and are augmented there.
  const bool on_device = r.device().is_cuda() && d.train_on_device.has_value();
  auto loader_options = [&](int64_t batch, const std::optional<data::DeviceAugment>& augment) {
    auto o = data::LoaderOptions().batch_size(batch).workers(c.workers).device(r.device());
    if (on_device) o.augment_on_device(augment);
    return o;
  };
  data::DataLoader train(d.train, data::DistributedSampler(d.train->size(), rank, world, true, c.seed),
                         loader_options(per_rank, d.train_on_device).drop_last(true).seed(c.seed),
                         on_device ? data::Transforms{} : d.train_transforms);
  // Evaluation in training-sized batches: its activations take the blocks training left in the
  // CPU allocator's cache (batches of 500 needed ~190 MB more at the peak).
  const int64_t eval_batch = per_rank;
  data::DataLoader test(d.test, data::DistributedSampler(d.test->size(), rank, world, false),
                        loader_options(eval_batch, d.test_on_device),
                        on_device ? data::Transforms{} : d.test_transforms);
  std::optional<data::DataLoader> mirrored;  // --tta
  if (c.tta)
    mirrored.emplace(d.test, data::DistributedSampler(d.test->size(), rank, world, false),
                     loader_options(eval_batch, d.mirrored_test_on_device),
                     on_device ? data::Transforms{} : d.mirrored_test_transforms);
  data::DataLoader* mirror = mirrored ? &*mirrored : nullptr;
  const int64_t per_epoch = train.num_batches();
  TANDEM_CHECK(per_epoch > 0, "--batch-size ", c.batch, " is larger than the ", d.train->size(),
               " training images");
  // The schedule plans for every epoch; --max-steps only stops early, so a run stopped there and
  // resumed ends exactly where an uninterrupted run ends.
  const int64_t total_steps = per_epoch * c.epochs;
  const int64_t stop_at = c.max_steps > 0 ? std::min(total_steps, c.max_steps) : total_steps;
  optim::OneCycleLR sched(opt, c.lr, std::max<int64_t>(total_steps, 2),
                          optim::OneCycleOptions().pct_start(0.25));
  int64_t step = 0, epoch = 0, batch = 0;
  if (sh.resume) {
    const io::TrainingState& st = *sh.resume;
    model->load_state_dict(st.model);
    opt.load_state_dict(st.optimizer);
    sched.load_state_dict(st.scheduler);
    if (!st.scaler.empty()) scaler.load_state_dict(st.scaler);
    step = st.step, epoch = st.epoch, batch = st.batch;
    if (lead)
      std::printf("resumed from %s at epoch %lld, step %lld\n", c.resume.c_str(),
                  static_cast<long long>(epoch + 1), static_cast<long long>(step));
  }
  if (lead)
    std::printf("%lld train / %lld test images, %d epochs of %lld steps, batch %lld (%d rank(s) x "
                "%lld), %d thread(s) per rank, %s%s%s\n",
                static_cast<long long>(d.train->size()), static_cast<long long>(d.test->size()),
                c.epochs, static_cast<long long>(per_epoch), static_cast<long long>(c.batch), world,
                static_cast<long long>(per_rank), get_num_threads(), c.precision.c_str(),
                c.channels_last ? ", channels-last" : "",
                c.grad_compression != "none" && world > 1
                    ? (", gradients allreduced in " + c.grad_compression).c_str()
                    : "");

  std::filesystem::create_directories(c.checkpoint_dir);
  const std::string ckpt = c.checkpoint_dir + "/" + c.model + "-" + c.dataset + ".safetensors";
  if (lead) {  // a folder it cannot write to is found now, not after the first epoch
    const std::string probe = ckpt + ".writable";
    TANDEM_CHECK(std::ofstream(probe).good(), "cannot write to --checkpoint-dir ",
                 c.checkpoint_dir);
    std::filesystem::remove(probe);
  }
  std::unique_ptr<std::ofstream> metrics;
  if (lead && !c.metrics.empty()) {
    metrics = std::make_unique<std::ofstream>(c.metrics, std::ios::app);
    TANDEM_CHECK(metrics->good(), "cannot open --metrics file ", c.metrics);
  }
  double acc = 0, train_seconds = 0;
  int64_t images_seen = 0, skipped = 0;
  // Where each rank's time went (every --report-every steps and after each epoch): gathered
  // from every rank, printed by rank 0, and a JSON line in --metrics. Timed where the work runs:
  // on a GPU, the device's time between marks on its stream (the timer reads a step's once the
  // device is past it).
  monitor::StepBreakdown breakdown;
  monitor::StepTimer timer(r.device());
  ddp.set_backward_end_hook([&timer] { timer.mark(monitor::Phase::exposed_comm); });
  timer.trace(sh.timeline.get(), rank);  // --trace on a GPU: its phases on a row of their own
  // GPU health (NVML, when the driver has it) after each epoch, from rank 0: in --metrics, and a
  // warning when a GPU throttles or its clock falls.
  std::optional<monitor::GpuHealth> health;
  std::vector<monitor::GpuSample> health_start;
  if (lead && r.device().is_cuda()) {
    health.emplace();
    if (health->available())
      health_start = health->sample();
    else
      std::printf("GPU health not recorded: %s\n", health->why_unavailable().c_str());
  }
  const auto report = [&](monitor::StepBreakdown& b) {
    timer.collect(b, /*wait=*/true);
    if (b.steps() == 0) return;
    const monitor::StepReport rep = monitor::gather_report(
        r.comm, b, monitor::ReportOptions().loader_setting("--workers " + std::to_string(c.workers)));
    b.reset();
    if (!lead) return;
    std::printf("%s", rep.text().c_str());
    if (metrics) *metrics << "{\"step\": " << step << ", \"breakdown\": " << rep.json() << "}\n";
  };
  model->train();
  for (; epoch < c.epochs && step < stop_at; ++epoch, batch = 0) {
    const int64_t steps = std::min(per_epoch, stop_at - step + batch);
    std::optional<monitor::ProgressBar> bar;
    if (lead)
      bar.emplace("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(c.epochs), steps,
                  stdout);
    const auto start = std::chrono::steady_clock::now();
    train.start_epoch(epoch, batch);
    double loss_sum = 0;
    int64_t loss_count = 0, images = 0;
    monitor::Timeline* tl = sh.timeline.get();
    using Clock = monitor::Timeline::Clock;
    while (batch < steps) {
      const auto wait_start = Clock::now();
      timer.mark(monitor::Phase::data);
      std::optional<data::Batch> b;
      {
        monitor::NvtxRange nvtx("data wait");
        b = train.next();
      }
      TANDEM_CHECK(b.has_value(), "the loader ended epoch ", epoch + 1, " early");
      if (tl) tl->add(rank, monitor::Timeline::compute, "data wait", wait_start, Clock::now());
      timer.mark(monitor::Phase::compute);
      opt.zero_grad();
      double step_loss = 0;
      // --grad-accum: micro-batches, all but the last under no_sync.
      for (int k = 0; k < c.grad_accum; ++k) {
        std::optional<parallel::DistributedDataParallel::NoSyncGuard> no_sync;
        if (k + 1 < c.grad_accum) no_sync.emplace(ddp);
        Tensor x = b->images.narrow(0, k * micro, micro).to(r.device()).contiguous(format);
        Tensor y = b->labels.narrow(0, k * micro, micro).to(r.device());
        Tensor loss;
        {
          monitor::Timeline::Span span(tl, rank, "forward");  // records nothing without --trace
          amp::autocast guard(low.value_or(DType::bf16), low.has_value());
          loss = cross_entropy(ddp.forward(x), y, loss_options);
        }
        if (c.grad_accum > 1) loss = loss / static_cast<double>(c.grad_accum);
        const auto backward_start = Clock::now();
        {
          monitor::NvtxRange nvtx("backward");
          scaler.scale(loss).backward();
        }
        const bool reduced = k + 1 == c.grad_accum;  // the others ran under no_sync
        if (reduced) timer.mark(monitor::Phase::optimizer);
        if (tl && !reduced) {
          tl->add(rank, monitor::Timeline::compute, "backward", backward_start, Clock::now());
        } else if (tl) {  // the host's times (reading them waits for the allreduces)
          const parallel::ReductionTimes& red = ddp.last_reduction();
          tl->add(rank, monitor::Timeline::compute, "backward", backward_start, red.backward_end);
          tl->add_reduction(rank, red);
          timer.trace_reduction(red);  // on a GPU, as the device ran them
        }
        step_loss += loss.item<double>();
      }
      {
        monitor::Timeline::Span span(tl, rank, "optimizer");
        if (scaler.step(opt))
          sched.step();  // a skipped step (inf/NaN under f16) does not advance the schedule
        else
          ++skipped;
        scaler.update();
      }
      timer.end_step(b->labels.numel());
      timer.collect(breakdown);
      ++step, ++batch;
      loss_sum += step_loss;
      ++loss_count;
      images += b->labels.numel() * world;
      if (bar) {
        char suffix[48];
        std::snprintf(suffix, sizeof suffix, "loss %.4f", loss_sum / static_cast<double>(loss_count));
        bar->update(batch, images, suffix);
      }
      if (c.report_every > 0 && step % c.report_every == 0 && batch < steps) {
        if (lead) std::printf("\n");  // below the progress bar, which goes on after it
        report(breakdown);
      }
    }
    if (bar) bar->finish();
    report(breakdown);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    train_seconds += seconds;
    images_seen += images;
    acc = evaluate(*model, test, r.comm, d.test->size(), format, mirror);
    Tensor mean_loss =
        from_vector(std::vector<double>{loss_count ? loss_sum / loss_count : 0.0}).to(r.device());
    r.comm.allreduce(mean_loss, comm::ReduceOp::avg).wait();
    const double train_loss = mean_loss.item<double>();
    if (!lead) continue;
    std::printf("epoch %lld: train loss %.4f, test accuracy %.2f%%, %.0f img/s, %.1f s\n",
                static_cast<long long>(epoch + 1), train_loss, 100 * acc, images / seconds, seconds);

    if (health && health->available()) {
      const auto now = health->sample();
      for (const std::string& w : monitor::health_warnings(health_start, now))
        std::printf("warning: %s\n", w.c_str());
      if (metrics) {
        *metrics << "{\"step\": " << step << ", \"gpu_health\": [";
        for (size_t i = 0; i < now.size(); ++i) *metrics << (i ? ", " : "") << now[i].json();
        *metrics << "]}\n";
      }
    }

    io::TrainingState st;
    st.model = model->state_dict();
    st.optimizer = opt.state_dict();
    st.scheduler = sched.state_dict();
    if (scaler.is_enabled()) st.scaler = scaler.state_dict();
    st.step = step;
    st.epoch = batch == per_epoch ? epoch + 1 : epoch;
    st.batch = batch == per_epoch ? 0 : batch;
    st.metadata = sh.identity;
    io::capture_rng(st, default_generator());
    io::save_checkpoint(ckpt, st);
    if (metrics) {
      *metrics << "{\"epoch\": " << epoch + 1 << ", \"step\": " << step
               << ", \"train_loss\": " << monitor::json_number(train_loss)
               << ", \"test_acc\": " << monitor::json_number(acc)
               << ", \"img_per_s\": " << monitor::json_number(images / seconds)
               << ", \"img_per_s_per_rank\": " << monitor::json_number(images / seconds / world)
               << ", \"world_size\": " << world
               << ", \"seconds\": " << monitor::json_number(seconds)
               << ", \"lr\": " << monitor::json_number(opt.param_groups()[0].options().get_lr())
               << ", \"loss_scale\": "
               << monitor::json_number(scaler.is_enabled() ? scaler.get_scale() : 1.0)
               << ", \"skipped_steps\": " << skipped << "}\n";
      metrics->flush();
    }
  }
  if (images_seen == 0)  // resumed a finished run
    acc = evaluate(*model, test, r.comm, d.test->size(), format, mirror);
  if (lead)
    std::printf("done: %s on %s, %lld steps, test accuracy %.2f%%, %.1f s training (%.0f img/s; "
                "%d rank(s), %.0f img/s per rank), checkpoint %s\n",
                c.model.c_str(), c.dataset.c_str(), static_cast<long long>(step), 100 * acc,
                train_seconds, train_seconds > 0 ? images_seen / train_seconds : 0.0, world,
                train_seconds > 0 ? images_seen / train_seconds / world : 0.0, ckpt.c_str());
  if (lead && c.bucket_mb == "auto" && world > 1)
    std::printf("bucket cap: %.3g MiB, chosen by the scaling predictor from the first step\n",
                ddp.bucket_cap_mb());
  if (lead && r.device().is_cuda()) {
    const auto m = cuda::memory_stats(r.device().index());
    std::printf("GPU memory (cuda:%d): peak %s allocated, %s reserved, %lld cudaMalloc calls\n",
                r.device().index(), detail::describe_bytes(static_cast<size_t>(m.peak_allocated_bytes)).c_str(),
                detail::describe_bytes(static_cast<size_t>(m.peak_reserved_bytes)).c_str(),
                static_cast<long long>(m.device_allocs));
  }
}

int run(const Config& c) {
  const auto env = comm::launch_env();
  // Every visible GPU by default (one rank each), else the CPU; --ranks picks how many.
  // device_count, not is_available: the banner below says what was found, in one line.
  const bool gpu = c.device == "cuda" || (c.device == "auto" && cuda::device_count() > 0);
  TANDEM_CHECK(!gpu || cuda::device_count() > 0, "--device cuda: no GPU is visible (",
               cuda::build_info(), ")");
  TANDEM_CHECK(!gpu || c.ranks <= cuda::device_count(), "--ranks ", c.ranks, ": only ",
               cuda::device_count(), " GPU(s) are visible, one rank each");
  const int ranks = c.ranks > 0 ? c.ranks : (gpu ? cuda::device_count() : 1);
  const int local_ranks = env ? 1 : ranks;
  const int world = env ? env->world : ranks;
  TANDEM_CHECK(c.batch % world == 0 && (c.batch / world) % c.grad_accum == 0,
               "--batch-size ", c.batch, " must split evenly over ", world, " rank(s) and ",
               c.grad_accum, " micro-batch(es)");
  if (!env || env->rank == 0) {
    if (gpu)
      std::printf("tandem-resnet: %s on %s, on %d GPU(s) (%s)\n", c.model.c_str(),
                  c.dataset.c_str(), local_ranks, cuda::build_info().c_str());
    else
      std::printf("tandem-resnet: %s on %s, on the CPU (%s kernels; %s; %d GPU(s) visible)\n",
                  c.model.c_str(), c.dataset.c_str(), kernels::cpu_isa_name(),
                  cuda::build_info().c_str(), cuda::device_count());
  }

  Shared sh{c, load_data(c), {}, std::nullopt,
            {{"model", c.model}, {"dataset", c.dataset}, {"batch_size", std::to_string(c.batch)}}};
  const Shape chw = sh.d.train->sample_shape();
  default_generator().manual_seed(c.seed);
  for (int i = 0; i < local_ranks; ++i)
    sh.replicas.push_back(nn::resnet_by_name(
        c.model, nn::ResNetOptions().in_channels(chw[0]).num_classes(sh.d.train->num_classes())));
  if (!c.resume.empty()) {
    // What a checkpoint must match to be resumed by this run.
    io::TrainingState st = io::load_checkpoint(c.resume);
    for (const auto& [key, value] : sh.identity) {
      auto it = st.metadata.find(key);
      TANDEM_CHECK(it != st.metadata.end() && it->second == value, "checkpoint ", c.resume,
                   " is from a run with ", key, " = ",
                   it == st.metadata.end() ? "(none)" : it->second, ", this run has ", key, " = ",
                   value);
    }
    io::restore_rng(st, default_generator());
    sh.resume = std::move(st);
  }
  const auto options = parallel::LaunchOptions().threads(c.threads).seed(c.seed);
  auto fn = [&](parallel::Rank& r) { train_rank(sh, r); };
  // Under a launcher each process writes its own ranks: FILE.rank<N>.
  const std::string trace_path =
      env && !c.trace.empty() ? c.trace + ".rank" + std::to_string(env->rank) : c.trace;
  if (!c.trace.empty()) {
    // Opened now (its folder made, as the checkpoints' is), so that a path it cannot write
    // fails before training, not after it.
    const std::filesystem::path parent = std::filesystem::path(trace_path).parent_path();
    std::error_code ignored;  // a folder it cannot make fails the open below
    if (!parent.empty()) std::filesystem::create_directories(parent, ignored);
    TANDEM_CHECK(std::ofstream(trace_path, std::ios::trunc).good(), "cannot write --trace file ",
                 trace_path);
    sh.timeline = std::make_unique<monitor::Timeline>();
  }
  if (env) {
    parallel::launch_env(fn, options);
  } else if (gpu) {
    std::vector<Device> devices;
    for (int i = 0; i < ranks; ++i) devices.emplace_back(DeviceType::cuda, i);
    parallel::launch(parallel::Devices(devices), fn, options);
  } else {
    parallel::launch(ranks, fn, options);
  }
  if (sh.timeline) {
    sh.timeline->write_chrome_trace(trace_path);
    std::printf("trace: %s (%zu spans; open in chrome://tracing or ui.perfetto.dev)\n",
                trace_path.c_str(), sh.timeline->events().size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a ResNet with tandem"};
  Config c;
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as argparse
  app.add_option("--model", c.model, "network")
      ->check(CLI::IsMember(nn::resnet_names()))
      ->capture_default_str();
  app.add_option("--dataset", c.dataset, "training data")
      ->check(CLI::IsMember({"fashion-mnist", "cifar10", "synthetic"}))
      ->capture_default_str();
  app.add_option("--data-dir", c.data_dir,
                 "dataset folder (default: Debian's Fashion-MNIST folder; cifar-10-batches-bin)");
  app.add_option("--epochs", c.epochs, "passes over the training set")->check(positive())->capture_default_str();
  app.add_option("--batch-size", c.batch, "images per step")->check(positive())->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate of the one-cycle schedule")->check(positive())->capture_default_str();
  app.add_option("--momentum", c.momentum, "SGD (Nesterov) momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "L2 penalty on conv and linear weights")
      ->check(non_negative(false))
      ->capture_default_str();
  app.add_option("--label-smoothing", c.label_smoothing, "weight of the uniform target in the cross-entropy loss")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app.add_option("--seed", c.seed, "seed for weights, data order and augmentation")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {  // CLI11 wraps -1 into an unsigned seed
            char* end = nullptr;
            errno = 0;
            std::strtoull(v.c_str(), &end, 10);
            const bool digits =
                !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
            return digits && *end == '\0' && errno == 0
                       ? ""
                       : "must be a whole number in [0, 2^64), got " + v;
          },
          "UINT64"))
      ->capture_default_str();
  app.add_option("--threads", c.threads, "CPU threads of all ranks together (0: all cores)")->check(CLI::Range(0, 4096))->capture_default_str();
  app.add_option("--workers", c.workers, "data loader threads")->check(CLI::Range(0, 64))->capture_default_str();
  app.add_option("--checkpoint-dir", c.checkpoint_dir, "where the checkpoint is written after every epoch")->capture_default_str();
  app.add_option("--resume", c.resume, "checkpoint file to continue from");
  app.add_option("--metrics", c.metrics, "append one JSON line per epoch to this file");
  app.add_option("--report-every", c.report_every,
                 "also print the step breakdown and straggler report every N steps (it always "
                 "comes after each epoch; 0: only then)")
      ->check(non_negative(true));
  app.add_option("--trace", c.trace, "write a Chrome trace of every step (per rank: data wait, forward, backward, each allreduce, optimizer)");
  app.add_option(
         "--max-steps", c.max_steps,
         "stop after this many steps in all (the schedule still plans for --epochs; 0: no limit)")
      ->check(non_negative(true));
  app.add_option("--device", c.device, "auto: every visible GPU, else the CPU")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  app.add_option("--ranks", c.ranks, "data-parallel ranks in this process: CPU ranks, or GPUs (0: every GPU, else 1 CPU rank; under mpirun: one per process)")->check(CLI::Range(0, 256))->capture_default_str();
  app.add_option("--precision", c.precision, "f32, or autocast to f16 (with loss scaling) or bf16")->check(CLI::IsMember({"f32", "f16", "bf16"}))->capture_default_str();
  app.add_option("--bucket-mb", c.bucket_mb,
                 "gradient bucket size of the allreduce, MiB, or auto (chosen by the scaling "
                 "predictor from the first step)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              monitor::parse_bucket_mb(v);
              return "";
            } catch (const Error& e) {
              return e.message();
            }
          },
          "MiB|auto"))
      ->capture_default_str();
  app.add_option("--grad-compression", c.grad_compression, "allreduce the gradients in 16 bits (bf16 or f16; half the bytes on the nccl backend), as PyTorch's compression hooks")->check(CLI::IsMember({"none", "f16", "bf16"}))->capture_default_str();
  app.add_option("--grad-accum", c.grad_accum, "micro-batches per step (gradients accumulated without allreduce)")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_flag("--tta", c.tta, "evaluate each test image and its mirror image, summing their logits (test-time augmentation)");
  app.add_flag("--sync-bn", c.sync_bn, "batch-norm statistics over all ranks (SyncBatchNorm)");
  app.add_flag("--channels-last", c.channels_last, "batches and convolution weights laid out channels-last (NHWC): cuDNN's fast layout for f16/bf16 on tensor cores; on the CPU it only adds copies");
  app.add_option("--synthetic-size", c.synthetic_size,
                 "training images of --dataset synthetic, at most 2^24 (test images: as many, at "
                 "most 1000)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tandem-resnet: error: %s (see --help)\n", e.what());
    return 2;
  }
  if (c.data_dir.empty())
    c.data_dir = c.dataset == "cifar10" ? "cifar-10-batches-bin" : data::kFashionMnistDir;
  try {
    return run(c);
  } catch (const Error& e) {
    std::fprintf(stderr, "tandem-resnet: error: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem-resnet: error: %s\n", e.what());
  }
  return 1;
}
