"""Texts shared by several test modules."""

# Dickens: one long passage, well over Kokoro's 510-token input limit, cut only at commas.
LONG_TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
    "it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had "
    "everything before us, we had nothing before us, we were all going direct to Heaven, we were all going "
    "direct the other way. In short, the period was so far like the present period, that some of its "
    "noisiest authorities insisted on its being received, for good or for evil, in the superlative degree "
    "of comparison only."
)

# Station announcements for the kiosks-in-step tests and benchmark (tests/system/test_kiosk_sync.py,
# tests/system/test_in_step_across_instances.py, benchmarks/sync.py). About 15 s of Hibari (English, the default voice):
STATION_EN_SHORT = (
    "The first train to the airport leaves from platform two at eleven fifteen. "
    "Passengers for the coast should change at the central station. "
    "The buffet car is at the front of the train and serves hot drinks until noon. "
    "Please keep your luggage with you at all times."
)
# About 65 s of Hibari.
STATION_EN = (
    STATION_EN_SHORT[:-1] + " and report anything unusual to a member of staff. "
    "We apologise for the delay to the earlier service, which was caused by a signal fault near the river bridge. "
    "The eleven forty service to the north will leave from platform six instead of platform four. "
    "Passengers with bicycles should use the front carriage, where there is room for six bicycles. "
    "Tickets bought online must be shown on your phone or printed before you board. "
    "Smoking is not permitted anywhere in the station, including on the platforms. "
    "If you need help with your luggage, please ask at the information desk next to the main entrance. "
    "Lost property can be collected from the office on the lower level between eight and six. "
    "The lifts to platforms three and four are out of service today; please use the ramp at the west end. "
    "Passengers are reminded to mind the gap between the train and the platform edge when boarding. "
    "Thank you for travelling with us, and have a pleasant journey."
)
# About 64 s of Mandarin; with no voice named it is Kokoro zf_xiaoxiao's (the default for zh).
STATION_ZH = (
    "各位旅客请注意，开往上海虹桥方向的G1023次列车现在开始检票，请您携带好随身物品，到三号检票口排队检票进站。"
    "乘坐本次列车的旅客请注意，列车停靠在十二站台，一号到八号车厢在站台南侧，九号到十六号车厢在站台北侧。"
    "请您按照车票上的车厢号码排队候车，不要拥挤，照顾好身边的老人和儿童。"
    "本站提醒您，站内禁止吸烟，请不要在候车室内奔跑打闹，注意保管好您的行李和贵重物品。"
    "如果您需要帮助，请到一楼服务台咨询，或者拨打车站服务电话。"
    "开往北京南方向的G108次列车因天气原因晚点约二十分钟，具体开车时间请留意车站广播和显示屏。"
    "给您带来的不便，我们深表歉意，感谢您的理解和支持。"
    "餐车位于列车的第五节车厢，提供热饮、盒饭和小吃，营业时间到晚上九点。"
    "祝您旅途愉快，一路平安。"
)
# About 15 s of Mandarin.
STATION_ZH_SHORT = (
    "各位旅客请注意，开往上海虹桥方向的G1023次列车现在开始检票，请您携带好随身物品，到三号检票口排队检票进站。"
    "祝您旅途愉快，一路平安。"
)
