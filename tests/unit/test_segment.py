"""Golden table for language segmentation of mixed text."""

import pytest

from rtts.text.segment import Segment, segment

GOLDEN = [
    ('Hello，欢迎来到杭州！今日は東京です。', None, [('en', 'Hello，'), ('zh', '欢迎来到杭州！'), ('ja', '今日は東京です。')]),
    ('请打开 Bluetooth 设置。', None, [('zh', '请打开 '), ('en', 'Bluetooth '), ('zh', '设置。')]),
    ('次は Shibuya です。', None, [('ja', '次は Shibuya です。')]),  # a romanized name in a Japanese sentence
    ('Gate 5号登机', None, [('en', 'Gate '), ('zh', '5号登机')]),
    ('价格是 $5 a month', None, [('zh', '价格是 '), ('en', '$5 a month')]),
    ('Platform 3 到了', None, [('en', 'Platform 3 '), ('zh', '到了')]),
    ('12:30', None, [('en', '12:30')]),
    ('東京', None, [('zh', '東京')]),
    ('東京', 'ja', [('ja', '東京')]),
    ('東京へようこそ', None, [('ja', '東京へようこそ')]),
    ('欢迎。ようこそ東京', None, [('zh', '欢迎。'), ('ja', 'ようこそ東京')]),
    ('안녕하세요 friends', None, [('ko', '안녕하세요 '), ('en', 'friends')]),
    ('我用 iPhone 15 拍照', None, [('zh', '我用 '), ('en', 'iPhone 15 '), ('zh', '拍照')]),
    ('The train to 上海 leaves at 10:30.', None, [('en', 'The train to '), ('zh', '上海 '), ('en', 'leaves at 10:30.')]),
    ('東京駅', 'zh', [('zh', '東京駅')]),
    ('ラーメン is delicious', None, [('ja', 'ラーメン '), ('en', 'is delicious')]),
    ('Welcome to 北京！', None, [('en', 'Welcome to '), ('zh', '北京！')]),
    ('这是 AI 时代。', None, [('zh', '这是 '), ('en', 'AI '), ('zh', '时代。')]),
    ('Hello world', None, [('en', 'Hello world')]),
    ('日本語とEnglishとカタカナ', None, [('ja', '日本語と'), ('en', 'English'), ('ja', 'とカタカナ')]),
    ('请在 9:30 前到达', None, [('zh', '请在 9:30 前到达')]),
    ('Tokyo タワー、Sky Tree、東京スカイツリー', None, [('ja', 'Tokyo タワー、'), ('en', 'Sky Tree、'), ('ja', '東京スカイツリー')]),
    ('Welcome to Tokyo!', None, [('en', 'Welcome to Tokyo!')]),
    ('今日は東京です。Welcome to Tokyo!', None, [('ja', '今日は東京です。'), ('en', 'Welcome to Tokyo!')]),
    ('2026年3月15日', 'ja', [('ja', '2026年3月15日')]),
    ('2026年3月15日', None, [('zh', '2026年3月15日')]),
    ('会議は Zoom で', None, [('ja', '会議は '), ('en', 'Zoom '), ('ja', 'で')]),
]


@pytest.mark.parametrize("text, hint, expected", GOLDEN)
def test_segments(text, hint, expected):
    got = segment(text, hint)
    assert [(s.lang, s.text) for s in got] == expected
    assert "".join(s.text for s in got) == text


def test_table_is_wide():
    assert len(GOLDEN) >= 20


def test_text_without_letters_takes_the_default():
    assert [(s.lang, s.text) for s in segment("3.14", default="zh")] == [("zh", "3.14")]
    assert segment("") == []


def test_degrees_celsius_are_read_with_their_number():
    assert segment("今天最高气温25°C，最低18℃。") == [Segment("zh", "今天最高气温25°C，最低18℃。")]
    assert segment("気温は25°Cです") == [Segment("ja", "気温は25°Cです")]
    assert segment("It is 25°C today.") == [Segment("en", "It is 25°C today.")]
