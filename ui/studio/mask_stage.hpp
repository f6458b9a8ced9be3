// The explainer's "document mask" stage, drawn (the numbers: ui/models/mask_model.hpp): left,
// the packed sequence's causal mask in G x G blocks, each block skipped (empty), full (solid)
// or partial (the mask's staircase drawn inside it), the documents along both axes; right, with a
// ring, the (query chunk, K/V chunk) block each ring rank computes at each hop, crossed out where
// the mask empties it (the ring skips it). `text` writes a label through the explainer's layout
// check.
#pragma once

#include <QPalette>
#include <QRectF>
#include <QString>
#include <functional>

#include "mask_model.hpp"

class QPainter;

namespace ulysses::ui {

using MaskText = std::function<void(QPainter&, const QRectF&, int, const QString&)>;
void paint_document_mask(QPainter& p, const QRectF& area, const DocumentMaskPicture& m, const QPalette& pal,
                         const MaskText& text);
// The caption under the stage list: the sequence, the share of the causal work kept, the blocks skipped.
QString document_mask_caption(const DocumentMaskPicture& m);

}  // namespace ulysses::ui
