#include "common/dtype.h"

#include "common/error.h"

namespace cerar {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat64: return 8;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kUInt8: return 1;
  }
  throw Error("unknown dtype");
}

const char* dtypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "f32";
    case DType::kFloat64: return "f64";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    case DType::kInt32: return "i32";
    case DType::kInt64: return "i64";
    case DType::kUInt8: return "u8";
  }
  return "?";
}

DType parseDType(const std::string& name) {
  if (name == "f32" || name == "float32") return DType::kFloat32;
  if (name == "f64" || name == "float64") return DType::kFloat64;
  if (name == "f16" || name == "float16") return DType::kFloat16;
  if (name == "bf16" || name == "bfloat16") return DType::kBFloat16;
  if (name == "i32" || name == "int32") return DType::kInt32;
  if (name == "i64" || name == "int64") return DType::kInt64;
  if (name == "u8" || name == "uint8") return DType::kUInt8;
  throw InvalidArgumentError("unsupported dtype '" + name +
                             "' (expected f32, f64, f16, bf16, i32, i64 or u8)");
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

bool isCerarDType(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }
bool isSixteenBitFloat(DType dtype) {
  return dtype == DType::kFloat16 || dtype == DType::kBFloat16;
}

}  // namespace cerar
