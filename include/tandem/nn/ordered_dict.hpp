// OrderedDict: a map that iterates in insertion order (as Python's dict and libtorch's
// OrderedDict), with std::map's interface, so a state dict lists its keys in the order torch does.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tandem/core/error.hpp"

namespace tandem::nn {

/// An entry: `first` and `second` as std::map's pairs (so `for (auto& [key, value] : dict)`
/// works), and libtorch's `key()` and `value()`.
template <typename Key, typename Value>
struct OrderedDictItem {
  OrderedDictItem(Key k, Value v) : first(std::move(k)), second(std::move(v)) {}
  const Key first;
  Value second;
  const Key& key() const noexcept { return first; }
  Value& value() noexcept { return second; }
  const Value& value() const noexcept { return second; }
};

/// Lookups go through a hash index; erase() is O(size).
template <typename Key, typename Value>
class OrderedDict {
 public:
  using key_type = Key;
  using mapped_type = Value;
  using value_type = OrderedDictItem<Key, Value>;
  using iterator = typename std::vector<value_type>::iterator;
  using const_iterator = typename std::vector<value_type>::const_iterator;

  OrderedDict() = default;
  /// Keys must be distinct.
  OrderedDict(std::initializer_list<value_type> entries) {
    for (const auto& entry : entries)
      TANDEM_CHECK(emplace(entry.first, entry.second).second, "OrderedDict: key '", entry.first,
                   "' given twice");
  }
  // The index refers to positions, so copies and moves carry it over unchanged.
  OrderedDict(const OrderedDict&) = default;
  OrderedDict(OrderedDict&&) = default;
  // value_type's key is const, so assignment copies, then swaps.
  OrderedDict& operator=(const OrderedDict& other) {
    if (this != &other) *this = OrderedDict(other);
    return *this;
  }
  OrderedDict& operator=(OrderedDict&& other) noexcept {
    entries_.swap(other.entries_);
    index_.swap(other.index_);
    return *this;
  }

  size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }
  iterator begin() noexcept { return entries_.begin(); }
  iterator end() noexcept { return entries_.end(); }
  const_iterator begin() const noexcept { return entries_.begin(); }
  const_iterator end() const noexcept { return entries_.end(); }

  iterator find(const Key& key) {
    auto it = index_.find(key);
    return it == index_.end() ? end() : begin() + static_cast<std::ptrdiff_t>(it->second);
  }
  const_iterator find(const Key& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? end() : begin() + static_cast<std::ptrdiff_t>(it->second);
  }
  size_t count(const Key& key) const { return index_.count(key); }
  bool contains(const Key& key) const { return index_.count(key) != 0; }

  /// The value of `key`; throws an IndexError naming the key when it is absent.
  Value& at(const Key& key) { return entries_[position(key)].second; }
  const Value& at(const Key& key) const { return entries_[position(key)].second; }
  /// The value of `key`, appended default-constructed when it is absent.
  Value& operator[](const Key& key) { return emplace(key, Value()).first->second; }
  /// The entry at `index` in insertion order, as libtorch's (for non-integer keys, so that the
  /// two operator[] never mean the same call); throws an IndexError past the end.
  template <typename K = Key, std::enable_if_t<!std::is_integral_v<K>, int> = 0>
  value_type& operator[](size_t index) {
    check_position(index);
    return entries_[index];
  }
  template <typename K = Key, std::enable_if_t<!std::is_integral_v<K>, int> = 0>
  const value_type& operator[](size_t index) const {
    check_position(index);
    return entries_[index];
  }
  value_type& front() { return entries_[end_position(0)]; }
  const value_type& front() const { return entries_[end_position(0)]; }
  value_type& back() { return entries_[end_position(size() - 1)]; }
  const value_type& back() const { return entries_[end_position(size() - 1)]; }

  /// Appends (key, value) unless `key` is present; as std::map::emplace, returns the entry and
  /// whether it was added.
  template <typename K, typename V>
  std::pair<iterator, bool> emplace(K&& key, V&& value) {
    auto it = index_.find(key);
    if (it != index_.end()) return {begin() + static_cast<std::ptrdiff_t>(it->second), false};
    entries_.emplace_back(std::forward<K>(key), std::forward<V>(value));
    index_.emplace(entries_.back().first, entries_.size() - 1);
    return {std::prev(end()), true};
  }
  std::pair<iterator, bool> insert(const value_type& entry) {
    return emplace(entry.first, entry.second);
  }
  /// libtorch's insert(key, value): appends and returns the value; a key already present throws
  /// (libtorch's "Key '...' already defined").
  template <typename V>
  Value& insert(const Key& key, V&& value) {
    auto [it, added] = emplace(key, std::forward<V>(value));
    TANDEM_CHECK(added, "OrderedDict::insert: key '", key, "' already defined");
    return it->second;
  }
  /// Sets `key` to `value`, keeping its position when present.
  template <typename V>
  std::pair<iterator, bool> insert_or_assign(const Key& key, V&& value) {
    auto [it, added] = emplace(key, std::forward<V>(value));
    if (!added) it->second = std::forward<V>(value);
    return {it, added};
  }

  /// Removes `key` (the others keep their order); returns how many entries were removed.
  size_t erase(const Key& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return 0;
    // value_type's key is const, so the tail is rebuilt rather than shifted.
    std::vector<value_type> kept;
    kept.reserve(entries_.size() - 1);
    for (auto& entry : entries_)
      if (!(entry.first == key)) kept.emplace_back(entry.first, std::move(entry.second));
    entries_.swap(kept);
    reindex();
    return 1;
  }
  void clear() noexcept {
    entries_.clear();
    index_.clear();
  }
  void reserve(size_t n) {
    entries_.reserve(n);
    index_.reserve(n);
  }

  std::vector<Key> keys() const {
    std::vector<Key> out;
    out.reserve(size());
    for (const auto& entry : entries_) out.push_back(entry.first);
    return out;
  }
  std::vector<Value> values() const {
    std::vector<Value> out;
    out.reserve(size());
    for (const auto& entry : entries_) out.push_back(entry.second);
    return out;
  }

 private:
  size_t position(const Key& key) const {
    auto it = index_.find(key);
    TANDEM_CHECK_INDEX(it != index_.end(), "OrderedDict: no key '", key, "'");
    return it->second;
  }
  size_t end_position(size_t index) const {
    TANDEM_CHECK_INDEX(!entries_.empty(), "OrderedDict: front() or back() of an empty dict");
    return index;
  }
  void check_position(size_t index) const {
    TANDEM_CHECK_INDEX(index < entries_.size(), "OrderedDict: index ", index,
                       " out of range for ", entries_.size(), " entries");
  }
  void reindex() {
    index_.clear();
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].first, i);
  }

  std::vector<value_type> entries_;
  std::unordered_map<Key, size_t> index_;
};

}  // namespace tandem::nn
