#include "core/types.h"

#include "core/control/message.h"

namespace cerar {

size_t Tensor::elements() const { return shapeElements(shape); }
size_t Tensor::bytes() const { return elements() * dtypeSize(dtype); }

}  // namespace cerar
