// Device discovery for the launcher: GPUs from nvidia-smi when present, else CPU ranks.
#pragma once

#include <QString>
#include <QVector>

namespace ulysses::ui {

struct DeviceInfo {
  QString name;
  qint64 memoryBytes = 0;
};

struct DeviceScan {
  QVector<DeviceInfo> gpus;  // empty when nvidia-smi is missing or fails
  int cpuThreads = 1;        // QThread::idealThreadCount()
  QString note;              // why there are no GPUs, for the UI
  // Ranks that fit: the GPUs for device cuda/auto with GPUs, else CPU threads.
  int ranksFor(const QString& device) const;
};

// Parses `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` output:
// "NVIDIA H200, 143771 MiB" per line. Lines that do not parse are skipped.
QVector<DeviceInfo> parseNvidiaSmiCsv(const QString& text);

// Runs nvidia-smi (`program`, found on PATH when it has no slash) with a timeout.
DeviceScan discoverDevices(int timeoutMs = 3000, const QString& program = QStringLiteral("nvidia-smi"));

}  // namespace ulysses::ui
