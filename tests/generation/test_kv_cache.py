import pytest
import torch
from transformers import DynamicCache

from kernelrl.generation.kv_cache import BatchKVCache, BufferedLayer
from kernelrl.generation.prefix_cache import PrefixCache, PrefixEntry, batch_from_entries, entry_from_row


def make(lengths, width, layers=2, value0=0.0):
    """A BatchKVCache whose row b holds values value0 + b + 1 in its last lengths[b] columns."""
    cache = DynamicCache()
    b = len(lengths)
    mask = torch.zeros(b, width, dtype=torch.long)
    kv = torch.zeros(b, 1, width, 2)
    for i, n in enumerate(lengths):
        mask[i, width - n :] = 1
        kv[i, :, width - n :] = value0 + i + 1
    for layer in range(layers):
        cache.update(kv.clone(), kv.clone(), layer)
    return BatchKVCache(cache, mask)


def test_extend_left_pads_the_narrower_batch():
    a, b = make([2], 2), make([4, 3], 4, value0=10)
    a.extend(b)
    assert a.mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]]
    keys = a.cache.layers[1].keys[:, 0, :, 0]
    assert keys.tolist() == [[0, 0, 1, 1], [11, 11, 11, 11], [0, 12, 12, 12]]


def test_select_drops_rows_and_all_padding_columns():
    c = make([6, 2, 3], 6)
    c.select(torch.tensor([2, 1]))
    # the 6-long row left; the remaining rows need only 3 columns
    assert c.mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert c.cache.layers[0].keys[:, 0, :, 0].tolist() == [[3, 3, 3], [0, 2, 2]]
    assert c.cache.get_seq_length() == 3


def test_append_step_grows_the_mask():
    c = make([1, 2], 2)
    assert c.append_step().tolist() == [[0, 1, 1], [1, 1, 1]]
    assert c.padding_fraction() == pytest.approx(1 / 6)


def test_buffered_layer_appends_in_place_and_adopts_assigned_tensors():
    layer = BufferedLayer()
    first = torch.randn(2, 1, 3, 4)
    layer.update(first, first + 1)
    ptr = layer.keys.data_ptr()
    for i in range(5):
        col = torch.full((2, 1, 1, 4), float(i))
        keys, values = layer.update(col, col + 1)
    assert keys.data_ptr() == ptr  # written into spare columns, no reallocation
    assert torch.equal(keys[:, :, :3], first) and keys[0, 0, 3:, 0].tolist() == [0, 1, 2, 3, 4]
    assert torch.equal(values, keys + 1)
    layer.drop_left(2)
    keys, _ = layer.update(col, col)
    assert layer.get_seq_length() == 7 and keys.data_ptr() == ptr + 2 * 4 * keys.element_size()
    layer.keys, layer.values = layer.keys[[1]], layer.values[[1]]  # assigned from outside (row select)
    keys, _ = layer.update(col[:1], col[:1])
    assert keys.shape == (1, 1, 8, 4)
    assert torch.equal(keys[0, 0, :1], first[1, 0, 2:3]) and keys[0, 0, 1:, 0].tolist() == [0, 1, 2, 3, 4, 4, 4]


def test_fill_overwrites_free_rows_in_place_right_aligned():
    c = make([4, 2, 3], 4)
    c.fill([1], make([2, 1], 2, value0=10), [1])  # row 1 of the newcomer (one real column)
    assert c.mask.tolist() == [[1, 1, 1, 1], [0, 0, 0, 1], [0, 1, 1, 1]]
    assert c.cache.layers[0].keys[1, 0, 3, 0].item() == 12
    c.fill([0], make([6], 6, value0=20), [0])  # wider newcomer: the cache widens first
    assert c.width == 6
    assert c.mask.tolist() == [[1] * 6, [0, 0, 0, 0, 0, 1], [0, 0, 0, 1, 1, 1]]
    assert c.cache.layers[1].keys[:, 0, :, 0].tolist() == [[21] * 6, [0, 0, 0, 0, 0, 12], [0, 0, 0, 3, 3, 3]]


def test_prefix_cache_evicts_least_recently_used_by_tokens():
    def entry(n):
        return PrefixEntry((torch.zeros(1, n, 2),), (torch.zeros(1, n, 2),), torch.zeros(5))

    cache = PrefixCache(max_tokens=10)
    cache.put((1,), entry(4))
    cache.put((2,), entry(4))
    assert cache.get((1,)) is not None  # (1,) is now the most recent
    cache.put((3,), entry(4))  # 12 tokens > 10: evict the least recently used, (2,)
    assert cache.get((2,)) is None and cache.get((1,)) is not None and len(cache) == 2
    cache.put((4,), entry(11))  # larger than the whole cache: not kept
    assert cache.get((4,)) is None


def test_entries_round_trip_into_a_batch():
    c = make([3, 1], 3)
    e0, e1 = (entry_from_row(c, i, n, torch.full((5,), float(i))) for i, n in enumerate((3, 1)))
    batch, logits = batch_from_entries([e1, e0])
    assert batch.mask.tolist() == [[0, 0, 1], [1, 1, 1]]
    assert batch.cache.layers[0].keys[:, 0, :, 0].tolist() == [[0, 0, 2], [1, 1, 1]]
    assert logits[:, 0].tolist() == [1.0, 0.0]
