// The provenance header in front of every large block. It describes the block
// for reports and debuggers; lowtide never trusts it to decide what to unmap
// (that comes from the arena's own tables, outside the block), because a
// buffer underflow in the host can overwrite it.
#pragma once
#include <cstdint>

namespace lowtide {

enum class Origin : std::uint8_t { malloc = 0, calloc, realloc, aligned, new_op, count };

enum HeaderFlags : std::uint8_t {
  kFromSmall = 1,  // moved over from the small path by a realloc
  // Moved by a realloc as one mapping (pal::move_grow): it grows in place
  // as the same mapping (pal::grow_mapping), since a tail mapped behind its
  // moved pages would be a mapping of its own. A hint only: a wrong bit
  // costs a refused mremap and a mapping, never correctness.
  kMovedWhole = 2,
  // Grown by a realloc before (LargePath::populate_tail: a block's first
  // growth onto fresh pages populates nothing).
  kGrown = 4,
};

struct BlockHeader {
  std::uint64_t magic;      // kHeaderMagic ^ address of the user pointer
  std::uint64_t base;       // start of the mapping
  std::uint64_t length;     // bytes mapped
  std::uint64_t requested;  // bytes asked for (latest realloc)
  std::uint64_t alignment;  // alignment asked for (16 = default)
  std::uint32_t tid;        // allocating thread (kernel tid)
  std::uint32_t site;       // call-site id (sites.hpp); 0 = none recorded
  Origin origin;
  std::uint8_t flags;
  std::uint8_t pad[2];
  // How many blocks this sampled block stands for, in 1/256ths (sites.hpp):
  // kept with the block so its free subtracts exactly what its allocation added.
  std::uint32_t site_weight;
  // What the block adds to its site's live bytes, in 1/256ths of a byte (its
  // allocation and each sampled realloc growth, scaled; sites.cpp): a free
  // or shrink takes back exactly this, or its share.
  std::uint64_t site_bytes;
};
static_assert(sizeof(BlockHeader) == 64, "the header is one cache line");

constexpr std::uint64_t kHeaderMagic = 0x6c6f77746964652eULL;  // "lowtide."

inline BlockHeader* header_of(void* user) { return static_cast<BlockHeader*>(user) - 1; }

inline void encode_header(BlockHeader* h, void* user, std::uint64_t base, std::uint64_t length,
                          std::uint64_t requested, std::uint64_t alignment, Origin origin,
                          std::uint8_t flags, std::uint32_t tid, std::uint32_t site = 0,
                          std::uint32_t site_weight = 0) {
  h->magic = kHeaderMagic ^ reinterpret_cast<std::uint64_t>(user);
  h->base = base;
  h->length = length;
  h->requested = requested;
  h->alignment = alignment;
  h->tid = tid;
  h->site = site;
  h->origin = origin;
  h->flags = flags;
  h->pad[0] = h->pad[1] = 0;
  h->site_weight = site_weight;
  h->site_bytes = 0;
}

inline bool header_valid(const BlockHeader* h, const void* user) {
  return h->magic == (kHeaderMagic ^ reinterpret_cast<std::uint64_t>(user));
}

}  // namespace lowtide
