// CerarStatus: the outcome of a collective inside a TensorFlow graph. A Python op can only fail
// with a few of TensorFlow's error codes; this kernel fails with the code the collective's
// error maps to (tf.errors.FailedPreconditionError for a mismatch, ...), or passes its values
// through. Compiled against the installed TensorFlow on first use (status_op.py); it uses only
// the op and kernel registration API, which TensorFlow keeps from release to release.
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

}  // namespace
