// A fixed pool of objects handed out and back in O(1) with no allocation: requests come from
// here on the data path. Sized once when a comm is created. Not thread-safe: callers hold the
// mutex of the shared endpoint the comm lives on (SharedEp::mu).
#pragma once
#include <cstddef>
#include <memory>

namespace nf {

template <typename T>
class Pool {
 public:
  explicit Pool(size_t capacity)
      : items_(new Slot[capacity]), capacity_(capacity), free_(nullptr), in_use_(0) {
    for (size_t i = capacity; i-- > 0;) {
      items_[i].next = free_;
      free_ = &items_[i];
    }
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // NULL when every object is out.
  T* get() {
    Slot* s = free_;
    if (s == nullptr) return nullptr;
    free_ = s->next;
    s->next = nullptr;
    ++in_use_;
    return &s->value;
  }

  void put(T* item) {
    Slot* s = reinterpret_cast<Slot*>(item);  // value is Slot's first member
    s->next = free_;
    free_ = s;
    --in_use_;
  }

  // True if p points at an object of this pool (any state): validates pointers from callers.
  bool owns(const void* p) const {
    const char* c = static_cast<const char*>(p);
    const char* lo = reinterpret_cast<const char*>(items_.get());
    const char* hi = reinterpret_cast<const char*>(items_.get() + capacity_);
    if (c < lo || c >= hi) return false;
    return (static_cast<size_t>(c - lo) % sizeof(Slot)) == 0;
  }

  // The position of an object of this pool (0 .. capacity-1).
  size_t index_of(const T* p) const {
    return static_cast<size_t>(reinterpret_cast<const Slot*>(p) - items_.get());
  }

  size_t capacity() const { return capacity_; }
  size_t in_use() const { return in_use_; }

  // Visits every object, in use or not (teardown).
  template <typename F>
  void for_each(F f) {
    for (size_t i = 0; i < capacity_; ++i) f(&items_[i].value);
  }

 private:
  struct Slot {
    T value{};  // first: a T* is also its Slot*
    Slot* next = nullptr;
  };
  std::unique_ptr<Slot[]> items_;
  size_t capacity_;
  Slot* free_;
  size_t in_use_;
};

}  // namespace nf
