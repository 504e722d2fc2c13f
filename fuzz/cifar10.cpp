// Fuzzes the CIFAR-10 binary reader with the contents of test_batch.bin (records of a label byte
// and 3072 pixel bytes). What it accepts must be whole records with labels in 0..9.
#include "common.hpp"
#include "tandem/data/dataset.hpp"

using namespace tandem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto dir = fuzz::scratch_dir();
  fuzz::write_file(dir / "test_batch.bin", data, size);
  data::ImageSplit split;
  try {
    split = data::load_cifar10(dir.string(), /*train=*/false);
  } catch (const Error&) {
    return 0;  // a clean rejection
  }
  const int64_t n = split.images.size(0);
  TANDEM_FUZZ_CHECK(n * 3073 == static_cast<int64_t>(size));
  TANDEM_FUZZ_CHECK(split.images.shape() == (Shape{n, 3, 32, 32}) &&
                    split.labels.shape() == Shape{n});
  fuzz::touch(split.images);
  fuzz::touch(split.labels);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = split.labels.data_ptr<int64_t>()[i];
    TANDEM_FUZZ_CHECK(label >= 0 && label < 10 && label == data[i * 3073]);
  }
  return 0;
}
