// Activity: each copy and memset the device ran is reported once, with its direction, size, stream, device
// clock times and the correlation id its submitting thread set; nothing is reported while reports are off.
#include "harness.h"

#include <mutex>
#include <vector>

namespace {

struct Reports {
  std::mutex mutex;
  std::vector<simActivityRecord> records;
};

void keep_record(const simActivityRecord* record, void* user_data) {
  auto* reports = static_cast<Reports*>(user_data);
  std::lock_guard<std::mutex> lock(reports->mutex);
  reports->records.push_back(*record);
}

}  // namespace

TEST(every_copy_and_memset_is_reported_once_with_its_way_stream_and_correlation) {
  auto& reports = harness::kept<Reports>();
  const size_t bytes = 4096;
  void* device = nullptr;
  void* pinned = nullptr;
  CHECK_OK(simMalloc(&device, bytes));
  CHECK_OK(simMallocHost(&pinned, bytes));
  std::vector<unsigned char> pageable(bytes, 7);
  simStream_t stream = nullptr;
  CHECK_OK(simStreamCreate(&stream));
  unsigned long long stream_id = 0;
  CHECK_OK(simStreamGetId(stream, &stream_id));
  long long before = 0;
  CHECK_OK(simActivityGetTimestamp(&before));

  CHECK_OK(simActivityEnable(keep_record, &reports));
  CHECK_OK(simActivitySetCorrelation(41));
  CHECK_OK(simMemcpyAsync(device, pageable.data(), bytes, simMemcpyHostToDevice, stream));
  CHECK_OK(simActivitySetCorrelation(42));
  CHECK_OK(simMemsetAsync(device, 0, bytes, stream));
  CHECK_OK(simMemcpyAsync(pinned, device, bytes, simMemcpyDeviceToHost, stream));
  CHECK_OK(simActivitySetCorrelation(0));
  CHECK_OK(simMemcpy(pageable.data(), device, bytes, simMemcpyDeviceToHost));  // on the default stream, here
  CHECK_OK(simStreamSynchronize(stream));
  CHECK_OK(simActivityEnable(nullptr, nullptr));
  CHECK_OK(simMemcpy(device, pageable.data(), bytes, simMemcpyHostToDevice));  // reports are off
  long long after = 0;
  CHECK_OK(simActivityGetTimestamp(&after));

  std::lock_guard<std::mutex> lock(reports.mutex);
  CHECK(reports.records.size() == 4);
  // in the order they ran: the stream's three in order, the synchronous copy on another stream at any point
  std::vector<simActivityRecord> on_stream, elsewhere;
  for (const simActivityRecord& record : reports.records)
    (record.stream_id == stream_id ? on_stream : elsewhere).push_back(record);
  CHECK(on_stream.size() == 3 && elsewhere.size() == 1);
  const simActivityRecord& upload = on_stream[0];
  CHECK(upload.kind == simActivityMemcpy && upload.copy_kind == simMemcpyHostToDevice);
  CHECK(!upload.source_pinned && !upload.destination_pinned);
  CHECK(upload.bytes == bytes && upload.correlation == 41);
  const simActivityRecord& memset = on_stream[1];
  CHECK(memset.kind == simActivityMemset && memset.correlation == 42 && memset.bytes == bytes);
  const simActivityRecord& download = on_stream[2];
  CHECK(download.copy_kind == simMemcpyDeviceToHost && download.destination_pinned && download.correlation == 42);
  const simActivityRecord& synchronous = elsewhere[0];
  CHECK(synchronous.kind == simActivityMemcpy && synchronous.copy_kind == simMemcpyDeviceToHost);
  CHECK(!synchronous.destination_pinned && synchronous.correlation == 0);
  for (const simActivityRecord& record : reports.records) {
    CHECK(record.device == 0);
    CHECK(before <= record.start_ns && record.start_ns <= record.end_ns && record.end_ns <= after);
  }
  // the stream ran its work in order, so its records follow one another on the device clock
  CHECK(upload.end_ns <= memset.start_ns && memset.end_ns <= download.start_ns);
  CHECK_OK(simStreamDestroy(stream));
  CHECK_OK(simFreeHost(pinned));
  CHECK_OK(simFree(device));
}

TEST(a_timestamp_needs_somewhere_to_go) {
  CHECK_STATUS(simActivityGetTimestamp(nullptr), simErrorInvalidValue);
}
