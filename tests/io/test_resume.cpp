// A resumed run continues bit-exactly: N steps, checkpoint, M more steps gives the same weights
// as N steps, checkpoint, a fresh process state loaded from the file, M steps. The run crosses an
// epoch boundary and uses everything a checkpoint must carry: model (with batch-norm buffers),
// SGD momentum, a one-cycle schedule, the loader's position and augmentation, dropout's RNG.

#include "../util.hpp"

using namespace tandem;
using tandem::testing::error_of;

namespace {

struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::shared_ptr<optim::SGD> opt;
  std::shared_ptr<optim::OneCycleLR> sched;
  std::unique_ptr<data::DataLoader> loader;
  int64_t step = 0, epoch = 0, batch = 0;

  static constexpr int64_t kTotalSteps = 40;

  explicit Run(uint64_t init_seed) {
    manual_seed(init_seed);
    model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Conv2d>(3, 8, 3, nn::Conv2dOptions().padding(1)),
        std::make_shared<nn::BatchNorm2d>(8), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Dropout>(0.2), std::make_shared<nn::AdaptiveAvgPool2d>(1),
        std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(8, 4)});
    opt = std::make_shared<optim::SGD>(optim::weight_decay_groups(*model, 1e-3),
                                       optim::SGDOptions().momentum(0.9).nesterov(true));
    sched = std::make_shared<optim::OneCycleLR>(*opt, 0.2, kTotalSteps);
    auto ds = std::make_shared<data::SyntheticDataset>(40, Shape{3, 8, 8}, 4, 11);
    loader = std::make_unique<data::DataLoader>(
        ds, data::DistributedSampler(40, 0, 1, true, 3),
        data::LoaderOptions().batch_size(12).workers(2).seed(5),
        data::Transforms{std::make_shared<data::RandomCrop>(1),
                         std::make_shared<data::RandomHorizontalFlip>()});
    loader->start_epoch(0);
  }

  void train(int64_t steps) {
    for (int64_t s = 0; s < steps; ++s) {
      auto b = loader->next();
      if (!b) {
        loader->start_epoch(++epoch);
        batch = 0;
        b = loader->next();
      }
      opt->zero_grad();
      cross_entropy(model->forward(b->images), b->labels).backward();
      opt->step();
      sched->step();
      ++step;
      ++batch;
    }
  }

  void save(const std::string& path) const {
    io::TrainingState st;
    st.model = model->state_dict();
    st.optimizer = opt->state_dict();
    st.scheduler = sched->state_dict();
    st.step = step;
    st.epoch = epoch;
    st.batch = batch;
    io::capture_rng(st, default_generator());
    io::save_checkpoint(path, st);
  }

  void load(const std::string& path) {
    io::TrainingState st = io::load_checkpoint(path);
    model->load_state_dict(st.model);
    opt->load_state_dict(st.optimizer);
    sched->load_state_dict(st.scheduler);
    step = st.step;
    epoch = st.epoch;
    batch = st.batch;
    io::restore_rng(st, default_generator());
    loader->start_epoch(epoch, batch);
  }
};

}  // namespace

TEST_CASE("a run resumed from a checkpoint continues bit-exactly", "[io][resume]") {
  tandem::testing::TempDir dir;
  const std::string path = (dir.path / "ckpt.safetensors").string();

  Run a(1);
  a.train(5);  // 4 batches per epoch: the checkpoint lands mid-epoch 1
  a.save(path);
  a.train(9);

  Run b(2);  // other initial weights: everything must come from the file
  b.load(path);
  CHECK(b.step == 5);
  CHECK(b.epoch == 1);
  CHECK(b.batch == 1);
  b.train(9);

  auto sa = a.model->state_dict(), sb = b.model->state_dict();
  for (const auto& [name, t] : sa) {
    INFO(name);
    CHECK(equal(t, sb.at(name)));
  }
  CHECK(a.opt->param_groups()[0].options().get_lr() == b.opt->param_groups()[0].options().get_lr());
  CHECK(a.opt->param_groups()[0].options().get_momentum() ==
        b.opt->param_groups()[0].options().get_momentum());

  // A checkpoint of another model is refused with the keys that differ; nothing is changed.
  auto other = nn::resnet20();
  io::TrainingState st = io::load_checkpoint(path);
  Tensor before = other->fc->weight.clone();
  CHECK_THAT(error_of([&] { other->load_state_dict(st.model); }),
             Catch::Contains("missing keys: conv1.weight, bn1.weight, bn1.bias"));
  CHECK(equal(other->fc->weight, before));
}
