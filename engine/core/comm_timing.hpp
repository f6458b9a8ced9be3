// Device-side timing of collectives on GPU ranks. ProcessGroupNCCL completes a work's future
// when the collective is enqueued, so host clocks around it measure the issue, not the
// transfer: a DeviceTimer puts marks on the device before and after the collective instead,
// and a DeviceSpan gives their host-clock times once the device has passed them (the Tracer
// asks at the end of the step: Tracer::record_range_later). CUDA: CUDA events
// (cuda_event_timer.hpp); tests: a fake with known times.
#pragma once

#include <cstdint>
#include <memory>

#include "torch_compat.hpp"

namespace ulysses {

class DeviceSpan {
 public:
  virtual ~DeviceSpan() = default;
  // Host-clock (prof::Tracer::now_ns) start and end of the collective as the device ran it;
  // false when unknown. May wait for the device to pass the end mark.
  virtual bool times(int64_t* start_ns, int64_t* end_ns) = 0;
};

class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  // Just before a collective is issued: its start mark.
  virtual std::shared_ptr<DeviceSpan> start() = 0;
  // Just after it is issued: its end mark, once `work` is done on the device (no host wait).
  virtual void end(DeviceSpan& span, c10d::Work& work) = 0;
};

}  // namespace ulysses
