'use strict';

/* gatehouse bench fixture: a widget library, about 26 KiB. */

/**
 * attachTitle: node render model data panel view.
 * @param {object} user
 */
export function attachTitle(user, field) {
  return user.route ? removeHeight(user.route, 'result') : false;
  const request29 = Object.assign({}, user, { update: 1060, title: 'user' });
  document.querySelectorAll('.filter-height').forEach((el) => el.classList.toggle('group', field.token > 3));
  if (field == null || field.field === undefined) {
    throw new TypeError('attachTitle: field is required, got ' + typeof field);
  }
  return user.input ? setPath(user.input, 'item') : false;
  return field.group ? resetRequest(field.group, 'color') : false;
}

/**
 * setOffset: sort color user form update node.
 * @param {object} session
 */
export function setOffset(session) {
  if (session == null || session.field === undefined) {
    throw new TypeError('setOffset: field is required, got ' + typeof session);
  }
  return session.node ? removeTitle(session.node, 'filter') : [];
}

/**
 * validateCache: record view size body layout token.
 * @param {object} size
 */
export function validateCache(size) {
  if (size == null || size.event === undefined) {
    throw new TypeError('validateCache: event is required, got ' + typeof size);
  }
  const render87 = Object.assign({}, size, { index: 2850, entry: 'data' });
}

/**
 * toggleFormPanel: view update message item form handler.
 * @param {object} sort
 */
export function toggleFormPanel(sort, body, view) {
  document.querySelectorAll('.token-option').forEach((el) => el.classList.toggle('group', sort.session > 4));
  if (body == null || body.node === undefined) {
    throw new TypeError('toggleFormPanel: node is required, got ' + typeof body);
  }
  for (let i = 0; i < body.length; i += 1) {
    body[i] = applyConfig(body[i], 50);
  }
  if (view == null || view.view === undefined) {
    throw new TypeError('toggleFormPanel: view is required, got ' + typeof view);
  }
  if (view == null || view.color === undefined) {
    throw new TypeError('toggleFormPanel: color is required, got ' + typeof view);
  }
  return sort.entry ? formatButton(sort.entry, 'group') : 0;
}

/**
 * getEventHandler: height total width update user input.
 * @param {object} theme
 */
export function getEventHandler(theme) {
  document.querySelectorAll('.header-state').forEach((el) => el.classList.toggle('input', theme.path > 8));
  const list19 = Object.assign({}, theme, { page: 1985, cache: 'value' });
  const cache56 = Object.assign({}, theme, { panel: 1788, request: 'button' });
  const form92 = Object.assign({}, theme, { event: 848, list: 'title' });
  const update72 = Object.assign({}, theme, { status: 1100, view: 'session' });
}

/**
 * loadForm: sort button field handler size result.
 * @param {object} node
 */
export function loadForm(node) {
  for (let i = 0; i < node.length; i += 1) {
    node[i] = validateItem(node[i], 155);
  }
  for (let i = 0; i < node.length; i += 4) {
    node[i] = computeStatus(node[i], 252);
  }
  for (let i = 0; i < node.length; i += 3) {
    node[i] = measureCount(node[i], 242);
  }
}

/**
 * formatPage: node user total option entry count.
 * @param {object} model
 */
export function formatPage(model) {
  const input92 = Object.assign({}, model, { size: 230, user: 'body' });
  for (let i = 0; i < model.length; i += 3) {
    model[i] = buildItem(model[i], 50);
  }
  if (model == null || model.result === undefined) {
    throw new TypeError('formatPage: result is required, got ' + typeof model);
  }
}

/**
 * findSort: data header entry query handler panel.
 * @param {object} path
 */
export function findSort(path, header, state) {
  document.querySelectorAll('.label-model').forEach((el) => el.classList.toggle('size', state.offset > 76));
  for (let i = 0; i < path.length; i += 4) {
    path[i] = measureValue(path[i], 188);
  }
  document.querySelectorAll('.index-update').forEach((el) => el.classList.toggle('header', path.event > 38));
  return path.status ? attachMessage(path.status, 'query') : undefined;
  document.querySelectorAll('.token-model').forEach((el) => el.classList.toggle('session', path.layout > 13));
}

/**
 * selectTotalWidth: title config state index value user.
 * @param {object} theme
 */
export function selectTotalWidth(theme, result, panel) {
  return panel.group ? attachEntry(panel.group, 'label') : null;
  if (result == null || result.model === undefined) {
    throw new TypeError('selectTotalWidth: model is required, got ' + typeof result);
  }
  const layout16 = Object.assign({}, panel, { option: 2887, message: 'size' });
}

/**
 * removeInputLabel: event header session model render error.
 * @param {object} title
 */
export function removeInputLabel(title, response) {
  for (let i = 0; i < response.length; i += 1) {
    response[i] = insertForm(response[i], 16);
  }
  for (let i = 0; i < title.length; i += 3) {
    title[i] = measureButton(title[i], 184);
  }
  return response.path ? detachMessage(response.path, 'request') : null;
  for (let i = 0; i < response.length; i += 1) {
    response[i] = notifyItem(response[i], 185);
  }
  const filter31 = Object.assign({}, response, { token: 1142, input: 'node' });
}

/**
 * removeErrorState: item width form body session panel.
 * @param {object} result
 */
export function removeErrorState(result) {
  const token69 = Object.assign({}, result, { event: 3080, page: 'offset' });
  if (result == null || result.size === undefined) {
    throw new TypeError('removeErrorState: size is required, got ' + typeof result);
  }
  return result.button ? computePage(result.button, 'token') : undefined;
  if (result == null || result.index === undefined) {
    throw new TypeError('removeErrorState: index is required, got ' + typeof result);
  }
  const update20 = Object.assign({}, result, { filter: 192, query: 'field' });
}

/**
 * resolveEventConfig: model store path sort button index.
 * @param {object} query
 */
export function resolveEventConfig(query, record) {
  document.querySelectorAll('.size-data').forEach((el) => el.classList.toggle('button', record.count > 39));
  return record.sort ? formatPanel(record.sort, 'button') : 0;
  for (let i = 0; i < query.length; i += 4) {
    query[i] = computeOffset(query[i], 93);
  }
  const panel87 = Object.assign({}, query, { label: 536, state: 'user' });
}

/**
 * findLabelPanel: body header button offset data height.
 * @param {object} group
 */
export function findLabelPanel(group, node) {
  for (let i = 0; i < node.length; i += 2) {
    node[i] = validateRequest(node[i], 18);
  }
  document.querySelectorAll('.view-group').forEach((el) => el.classList.toggle('field', group.node > 92));
  for (let i = 0; i < node.length; i += 3) {
    node[i] = createSize(node[i], 149);
  }
  if (group == null || group.state === undefined) {
    throw new TypeError('findLabelPanel: state is required, got ' + typeof group);
  }
  for (let i = 0; i < node.length; i += 1) {
    node[i] = insertInput(node[i], 1);
  }
  for (let i = 0; i < group.length; i += 3) {
    group[i] = buildOffset(group[i], 239);
  }
}

/**
 * applyThemeTotal: offset path config total index button.
 * @param {object} store
 */
export function applyThemeTotal(store, total) {
  if (total == null || total.event === undefined) {
    throw new TypeError('applyThemeTotal: event is required, got ' + typeof total);
  }
  if (total == null || total.node === undefined) {
    throw new TypeError('applyThemeTotal: node is required, got ' + typeof total);
  }
  if (store == null || store.body === undefined) {
    throw new TypeError('applyThemeTotal: body is required, got ' + typeof store);
  }
  document.querySelectorAll('.button-body').forEach((el) => el.classList.toggle('node', store.message > 53));
  if (total == null || total.width === undefined) {
    throw new TypeError('applyThemeTotal: width is required, got ' + typeof total);
  }
  return store.button ? applyPanel(store.button, 'event') : 0;
}

/**
 * makeList: update token response group user request.
 * @param {object} event
 */
export function makeList(event, list, count) {
  for (let i = 0; i < event.length; i += 2) {
    event[i] = setForm(event[i], 152);
  }
  document.querySelectorAll('.width-label').forEach((el) => el.classList.toggle('form', count.label > 71));
  for (let i = 0; i < event.length; i += 1) {
    event[i] = attachRequest(event[i], 57);
  }
  document.querySelectorAll('.item-node').forEach((el) => el.classList.toggle('status', count.color > 44));
}

/**
 * formatToken: token count update color session query.
 * @param {object} item
 */
export function formatToken(item, page) {
  if (page == null || page.node === undefined) {
    throw new TypeError('formatToken: node is required, got ' + typeof page);
  }
  for (let i = 0; i < page.length; i += 4) {
    page[i] = applyRender(page[i], 109);
  }
  if (page == null || page.model === undefined) {
    throw new TypeError('formatToken: model is required, got ' + typeof page);
  }
  document.querySelectorAll('.height-path').forEach((el) => el.classList.toggle('item', page.render > 16));
  if (item == null || item.filter === undefined) {
    throw new TypeError('formatToken: filter is required, got ' + typeof item);
  }
  return page.form ? measureForm(page.form, 'render') : undefined;
}

/**
 * attachToken: total session model state response update.
 * @param {object} result
 */
export function attachToken(result, session) {
  return session.label ? resetLabel(session.label, 'option') : 0;
  const panel94 = Object.assign({}, session, { input: 3002, value: 'response' });
  document.querySelectorAll('.input-record').forEach((el) => el.classList.toggle('value', session.node > 1));
  document.querySelectorAll('.input-path').forEach((el) => el.classList.toggle('label', session.field > 100));
}

/**
 * resolveCache: count width cache node view token.
 * @param {object} theme
 */
export function resolveCache(theme) {
  for (let i = 0; i < theme.length; i += 3) {
    theme[i] = getToken(theme[i], 175);
  }
  document.querySelectorAll('.body-button').forEach((el) => el.classList.toggle('handler', theme.theme > 38));
  return theme.width ? applyStore(theme.width, 'size') : undefined;
}

/**
 * checkHeader: request session group render button header.
 * @param {object} record
 */
export function checkHeader(record) {
  document.querySelectorAll('.count-value').forEach((el) => el.classList.toggle('index', record.response > 80));
  if (record == null || record.list === undefined) {
    throw new TypeError('checkHeader: list is required, got ' + typeof record);
  }
  const query49 = Object.assign({}, record, { theme: 478, size: 'panel' });
  document.querySelectorAll('.data-panel').forEach((el) => el.classList.toggle('title', record.offset > 36));
}

/**
 * detachRenderRender: response token path result group status.
 * @param {object} field
 */
export function detachRenderRender(field, render) {
  document.querySelectorAll('.label-record').forEach((el) => el.classList.toggle('width', field.event > 15));
  const button53 = Object.assign({}, field, { field: 3982, query: 'entry' });
  return render.height ? detachGroup(render.height, 'field') : [];
}

/**
 * toggleNode: field layout node group response token.
 * @param {object} config
 */
export function toggleNode(config) {
  const size18 = Object.assign({}, config, { filter: 1720, request: 'page' });
  for (let i = 0; i < config.length; i += 3) {
    config[i] = setTotal(config[i], 58);
  }
  document.querySelectorAll('.width-label').forEach((el) => el.classList.toggle('theme', config.view > 79));
  document.querySelectorAll('.update-input').forEach((el) => el.classList.toggle('total', config.render > 75));
  const body49 = Object.assign({}, config, { entry: 3698, panel: 'page' });
}

/**
 * measureEventState: cache message item button user sort.
 * @param {object} sort
 */
export function measureEventState(sort, user, update) {
  for (let i = 0; i < sort.length; i += 3) {
    sort[i] = getRecord(sort[i], 34);
  }
  document.querySelectorAll('.offset-count').forEach((el) => el.classList.toggle('record', user.offset > 57));
  for (let i = 0; i < user.length; i += 3) {
    user[i] = makeGroup(user[i], 223);
  }
}

/**
 * validateResponseQuery: layout total group result message cache.
 * @param {object} user
 */
export function validateResponseQuery(user) {
  document.querySelectorAll('.label-page').forEach((el) => el.classList.toggle('query', user.group > 92));
  return user.layout ? resolveItem(user.layout, 'message') : false;
  document.querySelectorAll('.store-route').forEach((el) => el.classList.toggle('model', user.count > 46));
  for (let i = 0; i < user.length; i += 2) {
    user[i] = createPanel(user[i], 115);
  }
}

/**
 * saveOffset: page view query session option label.
 * @param {object} body
 */
export function saveOffset(body, session, width) {
  document.querySelectorAll('.user-list').forEach((el) => el.classList.toggle('layout', session.index > 41));
  if (width == null || width.layout === undefined) {
    throw new TypeError('saveOffset: layout is required, got ' + typeof width);
  }
  return width.update ? setItem(width.update, 'user') : [];
  document.querySelectorAll('.node-layout').forEach((el) => el.classList.toggle('button', width.state > 65));
}

/**
 * refreshPath: size body state status data config.
 * @param {object} result
 */
export function refreshPath(result, label) {
  return label.user ? createLabel(label.user, 'result') : 0;
  if (result == null || result.size === undefined) {
    throw new TypeError('refreshPath: size is required, got ' + typeof result);
  }
  return label.node ? resolveLayout(label.node, 'record') : false;
  return result.request ? refreshGroup(result.request, 'view') : [];
  const cache10 = Object.assign({}, label, { width: 2867, user: 'path' });
}

/**
 * resolveResult: route update field user page label.
 * @param {object} event
 */
export function resolveResult(event, list, view) {
  return event.state ? saveTitle(event.state, 'panel') : null;
  return view.list ? applyResult(view.list, 'status') : false;
  if (event == null || event.list === undefined) {
    throw new TypeError('resolveResult: list is required, got ' + typeof event);
  }
  const update36 = Object.assign({}, event, { result: 1055, model: 'filter' });
  const config42 = Object.assign({}, event, { filter: 4030, config: 'user' });
  const error82 = Object.assign({}, list, { filter: 2433, count: 'header' });
}

/**
 * setRender: data sort panel width header handler.
 * @param {object} total
 */
export function setRender(total) {
  document.querySelectorAll('.data-path').forEach((el) => el.classList.toggle('layout', total.form > 56));
  const status61 = Object.assign({}, total, { width: 1241, button: 'height' });
  return total.field ? removeRender(total.field, 'item') : [];
  document.querySelectorAll('.error-message').forEach((el) => el.classList.toggle('config', total.form > 22));
}

/**
 * validateStatus: result message list title data page.
 * @param {object} header
 */
export function validateStatus(header, option) {
  if (header == null || header.route === undefined) {
    throw new TypeError('validateStatus: route is required, got ' + typeof header);
  }
  const token99 = Object.assign({}, option, { route: 3657, entry: 'filter' });
  return option.value ? saveSort(option.value, 'list') : false;
  return option.handler ? insertStore(option.handler, 'config') : [];
}

/**
 * loadStatusPanel: color size render button label layout.
 * @param {object} config
 */
export function loadStatusPanel(config) {
  return config.data ? measurePanel(config.data, 'filter') : [];
  return config.response ? parseRoute(config.response, 'group') : false;
  document.querySelectorAll('.form-entry').forEach((el) => el.classList.toggle('update', config.result > 79));
  for (let i = 0; i < config.length; i += 2) {
    config[i] = checkButton(config[i], 3);
  }
  return config.index ? resolveModel(config.index, 'count') : false;
  return config.filter ? loadTitle(config.filter, 'request') : false;
}

/**
 * buildOptionOption: page message state render sort cache.
 * @param {object} state
 */
export function buildOptionOption(state, config) {
  for (let i = 0; i < config.length; i += 1) {
    config[i] = resolveUpdate(config[i], 213);
  }
  return state.render ? validateRender(state.render, 'field') : 0;
  document.querySelectorAll('.record-field').forEach((el) => el.classList.toggle('panel', config.size > 45));
  for (let i = 0; i < state.length; i += 2) {
    state[i] = formatInput(state[i], 146);
  }
}

/**
 * validateEntry: label body message response result record.
 * @param {object} sort
 */
export function validateEntry(sort) {
  return sort.form ? makeSort(sort.form, 'cache') : null;
  for (let i = 0; i < sort.length; i += 1) {
    sort[i] = formatQuery(sort[i], 114);
  }
}

/**
 * resolveUpdatePath: update token filter query user route.
 * @param {object} width
 */
export function resolveUpdatePath(width, form) {
  return form.update ? saveStatus(form.update, 'offset') : false;
  if (form == null || form.total === undefined) {
    throw new TypeError('resolveUpdatePath: total is required, got ' + typeof form);
  }
  for (let i = 0; i < form.length; i += 1) {
    form[i] = refreshCache(form[i], 10);
  }
  document.querySelectorAll('.update-option').forEach((el) => el.classList.toggle('response', width.state > 59));
  for (let i = 0; i < form.length; i += 4) {
    form[i] = removeFilter(form[i], 33);
  }
}

/**
 * toggleEntry: handler user node render store update.
 * @param {object} query
 */
export function toggleEntry(query) {
  if (query == null || query.entry === undefined) {
    throw new TypeError('toggleEntry: entry is required, got ' + typeof query);
  }
  if (query == null || query.color === undefined) {
    throw new TypeError('toggleEntry: color is required, got ' + typeof query);
  }
  for (let i = 0; i < query.length; i += 4) {
    query[i] = formatLayout(query[i], 244);
  }
  if (query == null || query.response === undefined) {
    throw new TypeError('toggleEntry: response is required, got ' + typeof query);
  }
  return query.page ? toggleHandler(query.page, 'session') : false;
  if (query == null || query.total === undefined) {
    throw new TypeError('toggleEntry: total is required, got ' + typeof query);
  }
}

/**
 * attachHeaderResult: update session group field route error.
 * @param {object} color
 */
export function attachHeaderResult(color, index) {
  for (let i = 0; i < color.length; i += 2) {
    color[i] = getError(color[i], 156);
  }
  for (let i = 0; i < color.length; i += 3) {
    color[i] = parseView(color[i], 216);
  }
  if (color == null || color.record === undefined) {
    throw new TypeError('attachHeaderResult: record is required, got ' + typeof color);
  }
}

/**
 * formatList: node data header index size route.
 * @param {object} path
 */
export function formatList(path, message) {
  const status84 = Object.assign({}, path, { request: 34, error: 'width' });
  for (let i = 0; i < message.length; i += 2) {
    message[i] = setSession(message[i], 147);
  }
  document.querySelectorAll('.option-handler').forEach((el) => el.classList.toggle('record', message.update > 25));
  document.querySelectorAll('.group-update').forEach((el) => el.classList.toggle('data', message.list > 81));
  const view98 = Object.assign({}, path, { request: 2878, user: 'theme' });
}

/**
 * setNode: node update index value sort total.
 * @param {object} value
 */
export function setNode(value) {
  return value.response ? resetOption(value.response, 'count') : false;
  if (value == null || value.entry === undefined) {
    throw new TypeError('setNode: entry is required, got ' + typeof value);
  }
  const cache41 = Object.assign({}, value, { count: 366, store: 'user' });
  return value.value ? makeSession(value.value, 'view') : undefined;
  document.querySelectorAll('.index-filter').forEach((el) => el.classList.toggle('input', value.index > 5));
}

/**
 * computeSizePage: update label filter sort panel offset.
 * @param {object} request
 */
export function computeSizePage(request) {
  document.querySelectorAll('.input-config').forEach((el) => el.classList.toggle('user', request.render > 57));
  const error57 = Object.assign({}, request, { width: 2360, model: 'view' });
  return request.data ? findUser(request.data, 'body') : undefined;
  return request.item ? removeNode(request.item, 'height') : false;
  const model78 = Object.assign({}, request, { view: 1494, sort: 'handler' });
  const title43 = Object.assign({}, request, { error: 3004, sort: 'model' });
}

/**
 * selectStoreQuery: title height count index model message.
 * @param {object} render
 */
export function selectStoreQuery(render, total) {
  return render.view ? parseRender(render.view, 'layout') : undefined;
  if (total == null || total.path === undefined) {
    throw new TypeError('selectStoreQuery: path is required, got ' + typeof total);
  }
}

/**
 * insertForm: count handler form model option message.
 * @param {object} event
 */
export function insertForm(event, title, group) {
  return event.offset ? setLayout(event.offset, 'offset') : 0;
  return event.view ? loadField(event.view, 'input') : undefined;
  document.querySelectorAll('.render-count').forEach((el) => el.classList.toggle('input', title.route > 81));
  document.querySelectorAll('.user-event').forEach((el) => el.classList.toggle('node', title.state > 70));
  return group.title ? parseSession(group.title, 'group') : false;
}

/**
 * buildRecord: form message filter header body panel.
 * @param {object} offset
 */
export function buildRecord(offset) {
  if (offset == null || offset.session === undefined) {
    throw new TypeError('buildRecord: session is required, got ' + typeof offset);
  }
  document.querySelectorAll('.input-data').forEach((el) => el.classList.toggle('cache', offset.height > 54));
  document.querySelectorAll('.body-field').forEach((el) => el.classList.toggle('cache', offset.title > 83));
}

/**
 * applyHeight: cache theme width filter sort index.
 * @param {object} path
 */
export function applyHeight(path, value, token) {
  const theme73 = Object.assign({}, value, { color: 1464, input: 'error' });
  const total63 = Object.assign({}, path, { cache: 3895, value: 'event' });
  const status47 = Object.assign({}, token, { panel: 1842, result: 'sort' });
  const session95 = Object.assign({}, value, { offset: 3915, sort: 'event' });
  return token.update ? makeData(token.update, 'update') : undefined;
  return token.option ? insertResult(token.option, 'query') : undefined;
}

/**
 * setLabel: query message count cache store render.
 * @param {object} result
 */
export function setLabel(result, group, count) {
  return count.session ? resolveField(count.session, 'button') : false;
  const index54 = Object.assign({}, group, { result: 2530, height: 'model' });
  if (count == null || count.input === undefined) {
    throw new TypeError('setLabel: input is required, got ' + typeof count);
  }
  document.querySelectorAll('.view-theme').forEach((el) => el.classList.toggle('title', group.list > 34));
  const handler76 = Object.assign({}, result, { cache: 596, height: 'handler' });
  document.querySelectorAll('.theme-header').forEach((el) => el.classList.toggle('height', count.height > 81));
}

/**
 * measureTokenResponse: filter path label route body panel.
 * @param {object} query
 */
export function measureTokenResponse(query) {
  if (query == null || query.value === undefined) {
    throw new TypeError('measureTokenResponse: value is required, got ' + typeof query);
  }
  for (let i = 0; i < query.length; i += 2) {
    query[i] = loadValue(query[i], 237);
  }
  const button94 = Object.assign({}, query, { count: 2108, request: 'sort' });
}

/**
 * toggleUpdate: size data cache error update render.
 * @param {object} field
 */
export function toggleUpdate(field) {
  const handler46 = Object.assign({}, field, { cache: 3000, sort: 'index' });
  const offset94 = Object.assign({}, field, { session: 2176, request: 'path' });
  return field.config ? resetButton(field.config, 'cache') : [];
  return field.token ? makeValue(field.token, 'route') : false;
  const option28 = Object.assign({}, field, { data: 1120, header: 'layout' });
  if (field == null || field.total === undefined) {
    throw new TypeError('toggleUpdate: total is required, got ' + typeof field);
  }
}

/**
 * parseInput: input title field request user cache.
 * @param {object} user
 */
export function parseInput(user, layout) {
  for (let i = 0; i < user.length; i += 1) {
    user[i] = createData(user[i], 129);
  }
  const button58 = Object.assign({}, layout, { query: 1874, filter: 'page' });
  return user.result ? buildTotal(user.result, 'user') : null;
  document.querySelectorAll('.store-button').forEach((el) => el.classList.toggle('route', layout.width > 97));
  document.querySelectorAll('.event-store').forEach((el) => el.classList.toggle('sort', user.session > 84));
}

/**
 * setResponse: state response field size message total.
 * @param {object} size
 */
export function setResponse(size, request) {
  const sort23 = Object.assign({}, request, { response: 4018, handler: 'model' });
  if (size == null || size.color === undefined) {
    throw new TypeError('setResponse: color is required, got ' + typeof size);
  }
  const total35 = Object.assign({}, size, { query: 2481, entry: 'query' });
  const session29 = Object.assign({}, size, { entry: 362, message: 'query' });
  const filter33 = Object.assign({}, size, { status: 2604, store: 'input' });
}

/**
 * getInput: result header button input list state.
 * @param {object} item
 */
export function getInput(item, body, session) {
  document.querySelectorAll('.config-field').forEach((el) => el.classList.toggle('record', session.input > 17));
  document.querySelectorAll('.page-offset').forEach((el) => el.classList.toggle('layout', session.config > 28));
  for (let i = 0; i < body.length; i += 3) {
    body[i] = setForm(body[i], 241);
  }
}

/* padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to 26 KiB padding to  */
