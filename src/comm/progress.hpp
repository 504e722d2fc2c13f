// The thread that runs one rank's collectives in call order, shared by the backends: a call
// enqueues a body and gets a Work handle; the body runs with its deadline (start + timeout) and
// completes the Work with its outcome.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "tandem/comm/communicator.hpp"

namespace tandem::comm::detail {

class ProgressThread {
 public:
  using Body = std::function<void(Clock::time_point deadline)>;

  /// `timeout` gives the current timeout when a body starts; `on_failure(what, message)` runs when
  /// a body throws something other than a CommError (the backend aborts the group there).
  ProgressThread(std::function<Duration()> timeout,
                 std::function<void(const std::string&, const std::string&)> on_failure)
      : timeout_(std::move(timeout)),
        on_failure_(std::move(on_failure)),
        thread_([this] { run(); }) {}

  /// Runs what is queued (each body fails fast once the backend is aborted), then stops.
  ~ProgressThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Work enqueue(std::shared_ptr<WorkState> state, Body body) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({state, std::move(body)});
    }
    cv_.notify_all();
    return Work(std::move(state), timeout_());
  }

 private:
  struct Task {
    std::shared_ptr<WorkState> state;
    Body body;
  };

  void run() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        task.body(Clock::now() + timeout_());
        task.state->complete();
      } catch (const CommError&) {
        task.state->complete(std::current_exception());
      } catch (const std::exception& e) {
        on_failure_(task.state->what, e.what());
        task.state->complete(std::current_exception());
      }
    }
  }

  std::function<Duration()> timeout_;
  std::function<void(const std::string&, const std::string&)> on_failure_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once everything it uses exists
};

}  // namespace tandem::comm::detail
