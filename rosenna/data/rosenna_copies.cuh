/* The MLP kernels' weight copies (rosenna/emit/cuda/copies.py): each a struct holding one float
   array, so that an embedded copy can be initialised by a constant expression (a copy of
   <name>_model::packed, or the result of a packing evaluated while the file compiles: see
   rosenna_packed.cuh) instead of a second list of literals. The kernels read <copy>.v. */
template <int N>
struct rosenna_floats {
    float v[N];
};
