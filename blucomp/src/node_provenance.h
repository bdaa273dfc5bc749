// blucomp/src/node_provenance.h: which captured calls an op stands for (Note [Node provenance]).
//
// Note [Node provenance]
// blu-import puts `blu.node = i` on every op it makes for node i of the capture (views included);
// a pass that replaces ops by one (blu-fuse-elementwise's blu.fused, blu-fuse-epilogue's
// blu.matmul_epilogue) gives the new op `blu.nodes`, the sorted union of what the old ones stood
// for. The runtime uses it to run a compiled kernel in place of exactly those calls of the
// recorded step (their buffers and arguments are in the capture), and the calls no kernel
// covers as they were recorded.
#pragma once

#include <algorithm>
#include <vector>

#include "llvm/ADT/ArrayRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Operation.h"

namespace blu::comp {

inline void mergeNodes(mlir::Operation* into, llvm::ArrayRef<mlir::Operation*> from) {
  std::vector<int64_t> nodes;
  auto collect = [&](mlir::Operation* op) {
    if (auto one = op->getAttrOfType<mlir::IntegerAttr>("blu.node")) nodes.push_back(one.getInt());
    if (auto many = op->getAttrOfType<mlir::DenseI64ArrayAttr>("blu.nodes"))
      nodes.insert(nodes.end(), many.asArrayRef().begin(), many.asArrayRef().end());
  };
  collect(into);
  for (mlir::Operation* op : from) collect(op);
  if (nodes.empty()) return;
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  into->removeAttr("blu.node");
  into->setAttr("blu.nodes", mlir::Builder(into->getContext()).getDenseI64ArrayAttr(nodes));
}

// The capture buffer an SSA value of the step function holds whole (Note [Value buffers]): a
// function argument's from the function's blu.input_buffers, an op result's from its op's
// blu.result_buffers; -1 when none (a window, or a value no buffer holds).
inline int64_t bufferOf(mlir::Value v) {
  if (auto arg = mlir::dyn_cast<mlir::BlockArgument>(v)) {
    mlir::Operation* fn = arg.getOwner()->getParentOp();
    auto ids = fn ? fn->getAttrOfType<mlir::ArrayAttr>("blu.input_buffers") : nullptr;
    if (!ids || arg.getArgNumber() >= ids.size()) return -1;
    return mlir::cast<mlir::IntegerAttr>(ids[arg.getArgNumber()]).getInt();
  }
  auto result = mlir::cast<mlir::OpResult>(v);
  auto ids = result.getOwner()->getAttrOfType<mlir::DenseI64ArrayAttr>("blu.result_buffers");
  if (!ids || result.getResultNumber() >= ids.size()) return -1;
  return ids[result.getResultNumber()];
}

// Note [Value buffers] (import_capture.cpp): `to` (a result of the op that replaces `from`'s)
// holds the buffer `from` held.
inline void inheritBuffer(mlir::Value from, mlir::Value to) {
  auto src = mlir::dyn_cast<mlir::OpResult>(from);
  auto dst = mlir::dyn_cast<mlir::OpResult>(to);
  if (!src || !dst) return;
  auto ids = src.getOwner()->getAttrOfType<mlir::DenseI64ArrayAttr>("blu.result_buffers");
  if (!ids) return;
  mlir::Operation* op = dst.getOwner();
  std::vector<int64_t> out(op->getNumResults(), -1);
  if (auto old = op->getAttrOfType<mlir::DenseI64ArrayAttr>("blu.result_buffers"))
    out.assign(old.asArrayRef().begin(), old.asArrayRef().end());
  out[dst.getResultNumber()] = ids[src.getResultNumber()];
  op->setAttr("blu.result_buffers", mlir::Builder(op->getContext()).getDenseI64ArrayAttr(out));
}

}  // namespace blu::comp
