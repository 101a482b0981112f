// borrowed_pybind11.cpp -- the pybind11 producer recipe, matrix.cpp as
// shipped (included, not copied), in a module that also hands a Matrix out
// by reference: Owner.matrix, a HostMatrix member returned with
// return_value_policy::reference_internal, as a C++ library exposes the
// arrays its objects own.  pybind11 wraps such an object without a holder
// (the instance does not own it), and __init__ never runs on it.
// tests/test_recipes_cpp.py builds it and checks that the wrapper exports
// its buffer like a Matrix made by Matrix().
#include "pybind11/matrix.cpp"

namespace {
struct Owner {
    HostMatrix matrix{2, 3};
};
}  // namespace

PYBIND11_MODULE(borrowed_pybind11, m) {
    add_matrix(m);
    py::class_<Owner>(m, "Owner")
        .def(py::init<>())
        .def_property_readonly(
            "matrix", [](Owner &self) -> HostMatrix & { return self.matrix; },
            py::return_value_policy::reference_internal);
}
