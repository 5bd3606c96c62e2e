// A small test harness for the driver's tests: each test is a function registered by TEST; main()
// runs them one after another, each under a time limit, and prints "N passed, M failed".
// CHILD_TEST registers a test that only runs in a fresh process (run_in_fresh_process), for what
// needs an environment of its own (SIM_MEMORY, SIM_LAUNCH_BLOCKING) or ends its process.
#pragma once

#include "simdriver.h"

#include <atomic>
#include <functional>
#include <string>
#include <vector>

namespace harness {

struct Test {
  const char* name;
  void (*body)();
  bool fresh_process_only;
};

std::vector<Test>& registry();

struct Registrar {
  Registrar(const char* name, void (*body)(), bool fresh_process_only);
};

void record_failure(const char* file, int line, const std::string& what);

// "simErrorLaunchFailure: <the thread's last error message>"
std::string describe(simStatus_t status);

bool contains(const std::string& text, const std::string& part);

// What a child process did.
struct ChildResult {
  int exit_code = -1;    // when it exited
  int signal = 0;        // when a signal ended it
  bool timed_out = false;
  std::string out, err;
  std::string summary() const;  // for failure messages
};

// Runs this test binary again, from exec, running only `test`, with `environment` ("NAME=value")
// added to this process's environment; killed after `timeout_seconds`.
ChildResult run_in_fresh_process(const char* test, const std::vector<std::string>& environment,
                                 int timeout_seconds);

// Forks this process (the driver's state included) and runs `body` in the child, which then
// exit()s with its result; killed after `timeout_seconds`.
ChildResult run_in_fork(const std::function<int()>& body, int timeout_seconds);

// A kernel that holds its stream, and with one executor the whole device, until the test opens it
// (or 20 s pass: then it fails, so that no mistake hangs the tests). Gates are never freed, and
// the harness opens every gate after each test, so kernels queued by a failed test still end.
struct Gate {
  std::atomic<bool> open{false};
  std::atomic<bool> entered{false};
  std::atomic<bool> left{false};
};
Gate* new_gate();
simStatus_t launch_gate(simStream_t stream, Gate* gate);
// Waits (up to 20 s) until the executor runs the gate's kernel; false if it never did.
bool wait_until_entered(Gate* gate);

// Memory a test's kernels may still use after the test returned: never freed.
template <typename T>
T& kept() {
  return *new T();
}

}  // namespace harness

#define HARNESS_CONCAT_INNER(a, b) a##b
#define HARNESS_CONCAT(a, b) HARNESS_CONCAT_INNER(a, b)

#define TEST(name)                                                              \
  static void name();                                                           \
  static harness::Registrar HARNESS_CONCAT(name, _registrar)(#name, name, false); \
  static void name()

#define CHILD_TEST(name)                                                       \
  static void name();                                                          \
  static harness::Registrar HARNESS_CONCAT(name, _registrar)(#name, name, true); \
  static void name()

#define CHECK(condition)                                                    \
  do {                                                                      \
    if (!(condition)) {                                                     \
      harness::record_failure(__FILE__, __LINE__, "CHECK(" #condition ")"); \
      return;                                                               \
    }                                                                       \
  } while (0)

#define CHECK_MESSAGE(condition, message)                                                            \
  do {                                                                                               \
    if (!(condition)) {                                                                              \
      harness::record_failure(__FILE__, __LINE__, std::string("CHECK(" #condition "): ") + (message)); \
      return;                                                                                        \
    }                                                                                                \
  } while (0)

#define CHECK_STATUS(call, expected)                                                                    \
  do {                                                                                                  \
    simStatus_t harness_status = (call);                                                                \
    if (harness_status != (expected)) {                                                                 \
      harness::record_failure(__FILE__, __LINE__,                                                       \
                              std::string(#call) + " returned " + harness::describe(harness_status) +  \
                                  ", expected " + simGetErrorName(expected));                           \
      return;                                                                                           \
    }                                                                                                   \
  } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, simSuccess)
