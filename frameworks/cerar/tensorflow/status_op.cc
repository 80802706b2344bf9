// CerarStatus: the outcome of a collective inside a TensorFlow graph. A Python op can only fail
// with a few of TensorFlow's error codes; this kernel fails with the code the collective's
// error maps to (tf.errors.FailedPreconditionError for a mismatch, ...), or passes its values
// through. CerarWait (below) lets a TF1 session wait for a collective without holding a thread.
// Compiled against the installed TensorFlow on first use (status_op.py); they use only the op
// and kernel registration API, which TensorFlow keeps from release to release.
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace {

using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;

REGISTER_OP("CerarStatus")
    .Input("code: int32")
    .Input("message: string")
    .Input("values: T")
    .Output("outputs: T")
    .Attr("T: list(type) >= 1")
    .SetIsStateful()  // never folded, pruned or reordered away from its collective
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      for (int i = 2; i < c->num_inputs(); ++i) c->set_output(i - 2, c->input(i));
      return absl::OkStatus();
    });

class CerarStatusOp : public OpKernel {
 public:
  explicit CerarStatusOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    const int code = context->input(0).scalar<::tensorflow::int32>()();
    if (code != 0) {
      const std::string message(context->input(1).scalar<::tensorflow::tstring>()());
      context->SetStatus(absl::Status(static_cast<absl::StatusCode>(code), message));
      return;
    }
    for (int i = 2; i < context->num_inputs(); ++i) context->set_output(i - 2, context->input(i));
  }
};

REGISTER_KERNEL_BUILDER(Name("CerarStatus").Device(::tensorflow::DEVICE_CPU), CerarStatusOp);

// CerarWait: waits, without holding one of the session's threads, until a byte arrives on
// `fd` (the read end of a pipe whose writer ends when the collective has); passes `ticket`
// through. In a TF1 session a collective that blocked a thread could keep another from
// starting: with the threads all blocked in collectives that other ranks started in another
// order, no rank would go on.
REGISTER_OP("CerarWait")
    .Input("fd: int32")
    .Input("ticket: int64")
    .Output("done: int64")
    .SetIsStateful()
    .SetShapeFn([](::tensorflow::shape_inference::InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return absl::OkStatus();
    });

class CerarWaitOp : public ::tensorflow::AsyncOpKernel {
 public:
  explicit CerarWaitOp(OpKernelConstruction* context) : AsyncOpKernel(context) {}

  void ComputeAsync(OpKernelContext* context, DoneCallback done) override {
    const int fd = context->input(0).scalar<::tensorflow::int32>()();
    std::thread([context, done = std::move(done), fd] {
      char byte = 0;
      ssize_t got;
      do {
        got = ::read(fd, &byte, 1);
      } while (got < 0 && errno == EINTR);
      if (got < 0) context->SetStatus(absl::InternalError("cerar: waiting on a collective failed"));
      context->set_output(0, context->input(1));
      done();
    }).detach();
  }
};

REGISTER_KERNEL_BUILDER(Name("CerarWait").Device(::tensorflow::DEVICE_CPU), CerarWaitOp);

}  // namespace
