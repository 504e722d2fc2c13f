// A terminal progress bar with rate and ETA: redrawn in place on a terminal, one line every
// 10% when the output is a file or a pipe (CI logs stay readable).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace tandem::monitor {

class ProgressBar {
 public:
  /// `total` steps of `unit` (e.g. "img") each worth `items_per_step` for the rate.
  ProgressBar(std::string label, int64_t total, std::FILE* out = stderr)
      : label_(std::move(label)), total_(total), out_(out), tty_(isatty(fileno(out)) != 0),
        start_(Clock::now()) {}

  /// Reports that `step` of total steps are done, `items` processed so far (for the rate),
  /// and a free-form suffix such as "loss 0.53".
  void update(int64_t step, int64_t items, const std::string& suffix = "") {
    double elapsed = seconds();
    double rate = elapsed > 0 ? items / elapsed : 0.0;
    double eta = step > 0 ? elapsed * (total_ - step) / step : 0.0;
    int percent = total_ > 0 ? static_cast<int>(100 * step / total_) : 100;
    if (!tty_ && percent < next_percent_ && step != total_) return;
    next_percent_ = percent / 10 * 10 + 10;
    constexpr int kWidth = 24;
    int filled = total_ > 0 ? static_cast<int>(kWidth * step / total_) : kWidth;
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(out_, "%s%s [%s] %lld/%lld %3d%% | %s | %.0f/s | ETA %s%s", tty_ ? "\r" : "",
                 label_.c_str(), bar.c_str(), static_cast<long long>(step),
                 static_cast<long long>(total_), percent, suffix.c_str(), rate,
                 clock_str(eta).c_str(), tty_ ? "\033[K" : "\n");
    std::fflush(out_);
  }
  /// Ends the line of a terminal bar.
  void finish() {
    if (tty_) std::fputc('\n', out_);
    std::fflush(out_);
  }
  double seconds() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

 private:
  using Clock = std::chrono::steady_clock;
  static std::string clock_str(double s) {
    char buf[32];
    long t = static_cast<long>(s + 0.5);
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
    return buf;
  }

  std::string label_;
  int64_t total_;
  std::FILE* out_;
  bool tty_;
  Clock::time_point start_;
  int next_percent_ = 0;
};

}  // namespace tandem::monitor
