// Workgroups (and so partial sums) per buffer of the gradient-norm reduction; must equal
// `optim::PARTS_PER_SLOT` in Rust.
#define PARTS 64u
