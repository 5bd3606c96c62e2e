/*
 * simdriver.h: the C API of sim's fake accelerator driver.
 *
 * sim's PyTorch integration calls this driver as a vendor's code calls its own: devices and
 * contexts, device memory, copies, streams, events, kernel launches and error codes. Nothing here
 * works only because sim's memory happens to live in the host's address space, so a vendor could
 * implement the same API over a real device.
 *
 * The device is asynchronous. Work submitted to a stream (a kernel, a copy, an event record, a wait
 * on an event) runs later, in submission order within that stream and interleaved with the work of
 * the device's other streams; the submitting call returns at once. Synchronising calls
 * (simStreamSynchronize, simEventSynchronize, simDeviceSynchronize, simMemcpy) wait for work.
 *
 * One executor thread per process runs the work of every stream of every device. At each step it
 * takes the next task of a ready stream: the highest priority first, round-robin among streams of
 * equal priority; a stream whose next task waits for an unfinished event is not ready and holds
 * back nobody else. PyTorch's reference backend runs one worker thread per stream instead; sim does
 * not, because its kernels are host code that parallelises with OpenMP (at::parallel_for): each
 * worker thread would own an OpenMP team of its own, and several teams on one machine's cores
 * oversubscribe it. With one executor, exactly one OpenMP team ever computes for sim, whichever host
 * thread launched the work.
 *
 * Environment, read once when the driver initialises (on the first call):
 *   SIM_DEVICE_COUNT      number of devices, 1 to 64 (default 2)
 *   SIM_MEMORY_CAPACITY   each device's memory limit in bytes, units K, M, G allowed (default 8G)
 *   SIM_MEMORY            "unified" (default: the host may read and write device memory) or
 *                         "discrete" (device memory is closed to host code; see simMalloc)
 *   SIM_LAUNCH_BLOCKING   "1": every kernel launch, asynchronous copy and memset waits until it
 *                         has run and returns the device's pending error, as CUDA_LAUNCH_BLOCKING
 *                         makes CUDA's launches do
 * A value that cannot be parsed makes every call fail with simErrorInitializationError, and
 * simGetLastErrorMessage names the variable.
 *
 * Errors: every call returns a simStatus_t. A failed call also becomes the calling thread's last
 * error (simGetLastError), with a message for people (simGetLastErrorMessage). A kernel that fails
 * on the device cannot report to its launcher, who has moved on: the failure is held by the device
 * and returned by the next synchronising call on that device (whichever thread makes it), named
 * with the kernel's name. Until then the device skips the kernels, copies and memsets queued after
 * the failure (event records and waits still complete, so nothing waits forever); once the error
 * has been returned, the device runs work again.
 *
 * Processes: the executor thread starts when the first device comes into use (its memory, a stream,
 * a copy, a launch); calls that only read the configuration (simGetDeviceCount,
 * simGetDeviceProperties, simSetDevice, simDevicePrimaryCtxGetState) do not start it, as CUDA's
 * device count creates no context. A child forked after that point cannot use the driver (the
 * executor did not survive the fork); every call there fails with simErrorForkedChild, as CUDA
 * does, and the parent goes on working. A child forked before it uses the driver as its own. At process exit, queued work that has not started is discarded; a task
 * already running gets a few seconds to finish, then the process exits without it.
 */
#ifndef SIMDRIVER_H
#define SIMDRIVER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------ errors */

typedef enum simStatus_t {
  simSuccess = 0,
  simErrorInvalidValue = 1,          /* an argument was out of range or NULL where it may not be */
  simErrorOutOfMemory = 2,           /* the device's memory limit would be exceeded */
  simErrorInitializationError = 3,   /* the driver could not start (bad SIM_* variable, no memory) */
  simErrorDeinitialized = 4,         /* the process is exiting and the driver has shut down */
  simErrorInvalidDevice = 5,         /* no such device */
  simErrorInvalidHandle = 6,         /* not a live stream, event or context of this driver */
  simErrorInvalidDevicePointer = 7,  /* not inside a live allocation of device memory */
  simErrorNotReady = 8,              /* the work asked about has not finished (not a failure) */
  simErrorLaunchFailure = 9,         /* a kernel failed on the device (asynchronous) */
  simErrorNotPermitted = 10,         /* the call cannot be made from where it was made */
  simErrorForkedChild = 11           /* the driver cannot re-initialise in a forked child */
} simStatus_t;

/* The enumerator's name ("simErrorLaunchFailure"); "unrecognized error code" for any other value. */
const char* simGetErrorName(simStatus_t status);
/* A one-line description of the code, as cudaGetErrorString gives. */
const char* simGetErrorString(simStatus_t status);
/* The calling thread's last error, which is then reset to simSuccess. */
simStatus_t simGetLastError(void);
/* The calling thread's last error, left in place. */
simStatus_t simPeekAtLastError(void);
/* The message of the calling thread's last error ("" when there is none): what went wrong and what
   to do, naming the kernel for a device-side failure. Valid until this thread's next driver call. */
const char* simGetLastErrorMessage(void);

/* -------------------------------------------------------------------- devices, contexts */

/* Opaque handles. */
typedef struct simContext_st* simContext_t;
/* NULL as a stream means the current device's default stream: an ordinary stream, which does not
   synchronise with the device's other streams (as CUDA's non-blocking streams). */
typedef struct simStream_st* simStream_t;
typedef struct simEvent_st* simEvent_t;

typedef struct simDeviceProp {
  char name[32];                 /* "sim:N" */
  size_t totalMemory;            /* the device's memory limit in bytes */
  int discreteMemory;            /* 1: host code cannot read or write device memory */
  int launchBlocking;            /* 1: launches wait for their kernel (SIM_LAUNCH_BLOCKING=1) */
  int streamPriorityLeast;       /* the lowest stream priority (numerically largest) */
  int streamPriorityGreatest;    /* the highest stream priority (numerically smallest) */
} simDeviceProp;

/* The number of devices (SIM_DEVICE_COUNT). */
simStatus_t simGetDeviceCount(int* count);
/* The properties of one device. */
simStatus_t simGetDeviceProperties(simDeviceProp* prop, int device);
/* Makes `device` the calling thread's current device (each thread starts on device 0). */
simStatus_t simSetDevice(int device);
/* The calling thread's current device. */
simStatus_t simGetDevice(int* device);
/* The device's primary context, made active if it was not: its memory is reserved and its default
   stream exists. Any call that uses a device activates its context too, as CUDA's runtime does. */
simStatus_t simDevicePrimaryCtxRetain(simContext_t* context, int device);
/* Whether the device's primary context is active (*active 1) without activating it. */
simStatus_t simDevicePrimaryCtxGetState(int device, int* active);
/* The device a context belongs to. */
simStatus_t simCtxGetDevice(int* device, simContext_t context);
/* Makes the context's device the calling thread's current device. */
simStatus_t simCtxSetCurrent(simContext_t context);
/* The primary context of the calling thread's current device. */
simStatus_t simCtxGetCurrent(simContext_t* context);
/* Caps the device's memory at `bytes` (a real driver can enforce such a limit too); allocations
   beyond it fail with simErrorOutOfMemory. At most the device's reserved address range. */
simStatus_t simDeviceSetMemoryLimit(int device, size_t bytes);
/* Free and total bytes of the current device's memory. */
simStatus_t simMemGetInfo(size_t* free_bytes, size_t* total_bytes);

/* ---------------------------------------------------------------------------- streams */

/* The range of stream priorities, least (0) to greatest (-2); a lower number runs first. */
simStatus_t simDeviceGetStreamPriorityRange(int* least, int* greatest);
/* A new stream of the current device with the least priority. */
simStatus_t simStreamCreate(simStream_t* stream);
/* A new stream of the current device with a priority, clamped into the range above. */
simStatus_t simStreamCreateWithPriority(simStream_t* stream, int priority);
/* Destroys a stream: returns at once; the work already queued on it still runs. */
simStatus_t simStreamDestroy(simStream_t stream);
/* The stream's priority. */
simStatus_t simStreamGetPriority(simStream_t stream, int* priority);
/* The stream's device. */
simStatus_t simStreamGetDevice(simStream_t stream, int* device);
/* A number that identifies the stream within the process (the default streams' are 0 to N-1). */
simStatus_t simStreamGetId(simStream_t stream, unsigned long long* id);
/* simSuccess if all work queued on the stream has finished, simErrorNotReady if not (which, not
   being a failure, does not become the last error). */
simStatus_t simStreamQuery(simStream_t stream);
/* Waits until all work queued on the stream has finished; returns the device's pending error. */
simStatus_t simStreamSynchronize(simStream_t stream);
/* Work queued on `stream` after this call starts only once the event's latest record (at the time
   of this call) has completed. Returns at once; an event never recorded is no wait at all. */
simStatus_t simStreamWaitEvent(simStream_t stream, simEvent_t event, unsigned int flags);
/* Waits until all work on every stream of the current device has finished; returns its pending
   error. */
simStatus_t simDeviceSynchronize(void);

/* ----------------------------------------------------------------------------- events */

enum { simEventDefault = 0, simEventDisableTiming = 1 };

/* A new event that keeps the device's clock time when its record completes. */
simStatus_t simEventCreate(simEvent_t* event);
/* A new event; simEventDisableTiming makes it unusable with simEventElapsedTime. */
simStatus_t simEventCreateWithFlags(simEvent_t* event, unsigned int flags);
/* Destroys an event: returns at once; records and waits already queued still complete. */
simStatus_t simEventDestroy(simEvent_t event);
/* Queues a record of the event on the stream: it completes when the stream reaches it, noting the
   device's clock. A new record replaces the previous one for later queries and waits. */
simStatus_t simEventRecord(simEvent_t event, simStream_t stream);
/* simSuccess if the latest record has completed (or there was none), simErrorNotReady if not. */
simStatus_t simEventQuery(simEvent_t event);
/* Waits until the latest record has completed; returns its device's pending error. */
simStatus_t simEventSynchronize(simEvent_t event);
/* Milliseconds of the device's clock between two completed records (start to end). */
simStatus_t simEventElapsedTime(float* milliseconds, simEvent_t start, simEvent_t end);

/* ----------------------------------------------------------------------------- memory */

typedef enum simMemcpyKind {
  simMemcpyHostToHost = 0,
  simMemcpyHostToDevice = 1,
  simMemcpyDeviceToHost = 2,
  simMemcpyDeviceToDevice = 3,
  simMemcpyDefault = 4  /* inferred from the pointers */
} simMemcpyKind;

typedef enum simMemoryType {
  simMemoryTypeUnregistered = 0,  /* pageable host memory, or no memory the driver knows */
  simMemoryTypeHost = 1,          /* pinned host memory from simMallocHost */
  simMemoryTypeDevice = 2         /* device memory from simMalloc */
} simMemoryType;

typedef struct simPointerAttributes {
  simMemoryType type;
  int device;        /* the owning device for device memory, -1 otherwise */
  void* base;        /* the start of the allocation holding the pointer, NULL if unregistered */
  size_t size;       /* that allocation's size in bytes */
} simPointerAttributes;

/* Device memory on the current device, aligned to 256 bytes; 0 bytes gives NULL. With
   SIM_MEMORY=discrete, host code that reads or writes it stops the process with a message naming
   sim's device memory and the address. Only a thread running a task reaches it, where the
   processor has memory protection keys; elsewhere protection is per process, so while the
   executor is running tasks the memory is open to every thread and a host access then is not
   caught (it closes again before a synchronising call returns when no more work is ready). */
simStatus_t simMalloc(void** pointer, size_t bytes);
/* Frees device memory after all work queued on its device has finished; NULL is a no-op. */
simStatus_t simFree(void* pointer);
/* Frees device memory when the stream reaches this point; returns at once. */
simStatus_t simFreeAsync(void* pointer, simStream_t stream);
/* Pinned host memory: asynchronous copies from and to it do not wait. (A real driver page-locks it
   for DMA; sim, whose copies are the executor's memcpy, only remembers the block.) */
simStatus_t simMallocHost(void** pointer, size_t bytes);
/* Frees pinned host memory after all work queued on every device has finished. */
simStatus_t simFreeHost(void* pointer);
/* What kind of memory a pointer points into, and which allocation holds it. */
simStatus_t simPointerGetAttributes(simPointerAttributes* attributes, const void* pointer);
/* Copies `bytes` and returns once the copy is done. It runs on the default stream of the device
   involved (the source's for device to device), after the work queued there, and returns that
   device's pending error. */
simStatus_t simMemcpy(void* dst, const void* src, size_t bytes, simMemcpyKind kind);
/* Queues a copy on the stream and returns at once, with two exceptions (as CUDA makes them): from
   pageable host memory, the bytes are staged into the driver's own buffer before the call returns
   (the caller may reuse its buffer at once); into pageable host memory, the call waits until the
   copy has run and returns the device's pending error. Pinned host memory and device memory are
   never waited for. */
simStatus_t simMemcpyAsync(void* dst, const void* src, size_t bytes, simMemcpyKind kind, simStream_t stream);
/* Sets `bytes` bytes of device memory to `value` when the stream reaches this point. */
simStatus_t simMemsetAsync(void* pointer, int value, size_t bytes, simStream_t stream);

/* ----------------------------------------------------------------------------- activity */

/* What a profiler learns of the copies and memsets the device ran, as a real driver's activity
   interface reports them (CUPTI's, for CUDA): one record per copy or memset, with its start and end on
   the device's clock and the correlation id its submitting thread set. Kernels are not reported here:
   their launcher times them. */
typedef enum simActivityKind { simActivityMemcpy = 0, simActivityMemset = 1 } simActivityKind;

typedef struct simActivityRecord {
  simActivityKind kind;
  simMemcpyKind copy_kind;          /* simActivityMemcpy: which way, never simMemcpyDefault */
  int source_pinned;                /* the host end of a copy is pinned memory (simMallocHost) */
  int destination_pinned;
  size_t bytes;
  int device;
  unsigned long long stream_id;     /* simStreamGetId's */
  long long start_ns;               /* the device's clock (simActivityGetTimestamp) */
  long long end_ns;
  unsigned long long correlation;   /* simActivitySetCorrelation's value when it was queued; 0 if none */
} simActivityRecord;

/* Called once per copy or memset that ran, on the thread that ran it, with no lock of the driver's held.
   It must not call the driver. */
typedef void (*simActivityCallback_t)(const simActivityRecord* record, void* user_data);

/* Reports each copy and memset queued from now on to `callback`; NULL stops the reports (work queued
   before still reports to the callback it was queued under). */
simStatus_t simActivityEnable(simActivityCallback_t callback, void* user_data);
/* The calling thread's correlation id for the copies and memsets it queues from now on; 0 for none. */
simStatus_t simActivitySetCorrelation(unsigned long long correlation);
/* The device's clock now, in nanoseconds: the clock of activity records and event records. */
simStatus_t simActivityGetTimestamp(long long* nanoseconds);

/* ----------------------------------------------------------------------------- launch */

/* A kernel: host code the executor runs on the device's behalf. It returns 0 on success; any
   other value marks the device with simErrorLaunchFailure, naming the kernel. */
typedef int (*simKernelFunc_t)(void* args);
/* Called once on the launch's copy of the arguments after the kernel ran or was discarded. */
typedef void (*simKernelArgsRelease_t)(void* args);

/* Queues `kernel` on the stream and returns at once (SIM_LAUNCH_BLOCKING=1: once it ran, with its
   error). `args_bytes` bytes at `args` are copied at launch, as CUDA copies kernel parameters, and
   the kernel gets the copy; with `args_bytes` 0 it gets `args` itself. `name` (copied) names the
   kernel in errors. `release` may be NULL. */
simStatus_t simLaunchKernel(simStream_t stream, const char* name, simKernelFunc_t kernel, const void* args,
                            size_t args_bytes, simKernelArgsRelease_t release);
/* Runs `kernel(args)` on the calling thread as the stream's next kernel and returns once it ran: after
   the work queued on the stream before it and before any queued after it, with device memory open to
   it in either memory mode; the device's other streams go on meanwhile. Its failure (or a pending one,
   when it does not run) is this call's error. For a kernel whose caller would wait for it anyway: the
   hand-over to the executor and back costs more than a small kernel. A simulator's shortcut: a real
   device cannot run its kernels on the host's thread. */
simStatus_t simLaunchKernelSync(simStream_t stream, const char* name, simKernelFunc_t kernel, void* args);
/* Called by a running kernel before it returns non-zero: the message the error will carry. A kernel
   may queue work, but a call that waits (a synchronize, simMemcpy, simFree) made by a kernel fails
   with simErrorNotPermitted: the executor would wait for itself. */
void simKernelSetErrorMessage(const char* message);

#ifdef __cplusplus
}
#endif

#endif /* SIMDRIVER_H */
